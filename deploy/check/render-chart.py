#!/usr/bin/env python3
"""Lint and render a Helm chart offline with Helm's own engine, for tests/deploy.rs.

    render-chart.py CHART_DIR [--values FILE]... [--set-json JSON]... [--name N] [--namespace NS]

Values are merged like `helm template -f A -f B --set-json ...`: the chart's values.yaml, then
each file, then each JSON object (maps merge, anything else replaces). `helm lint --strict` runs
first; any warning or error fails. Prints the manifests as one YAML stream with `# Source:`
comments, as `helm template` does; NOTES.txt is rendered too (so it must not fail) but not
printed. Exit 1 with the reason on stderr when linting or rendering fails.

Uses helm-python-sdk (deploy/check/requirements.txt), which bundles Helm v4's Go SDK.
"""

import argparse
import json
import sys

import helm_python as helm

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
KUBE_VERSION = "v1.30.0"


def merge(base, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chart")
    parser.add_argument("--values", action="append", default=[])
    parser.add_argument("--set-json", action="append", default=[])
    parser.add_argument("--name", default="aap-gateway")
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args()

    values = {}
    for path in args.values:
        with open(path, encoding="utf-8") as f:
            merge(values, helm.values_from_yaml(f.read()))
    for text in args.set_json:
        merge(values, json.loads(text))

    report = helm.lint(
        args.chart, values, strict=True, namespace=args.namespace, kube_version=KUBE_VERSION
    )
    problems = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
    problems += [{"severity": 3, "path": "", "error": e} for e in report.get("errors") or []]
    if problems:
        for m in problems:
            print(f"lint: {m.get('path', '')}: {m.get('error')}", file=sys.stderr)
        return 1

    with helm.Chart.load(args.chart) as chart:
        manifests = chart.render(
            values, name=args.name, namespace=args.namespace, is_install=True
        )
    for path in sorted(manifests):
        text = manifests[path]
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        sys.stdout.write(f"---\n# Source: {path}\n{text.rstrip()}\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except helm.HelmError as e:  # render or values errors, with Helm's message
        print(f"helm: {e}", file=sys.stderr)
        sys.exit(1)
