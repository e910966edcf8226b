#!/usr/bin/env python3
"""Interop check: the official MCP Python SDK (`mcp` from PyPI) against aap-gateway's MCP binding.

Usage: python_client.py ENDPOINTS_FILE
       python_client.py --throttle ENDPOINTS_FILE   (a gateway allowing one call per skill)

ENDPOINTS_FILE is the JSON written by `aap-gateway demo --endpoints-file F`; each dealer has an
`mcp_url`. Only the SDK talks MCP: `mcp.Client(url)` connects over Streamable HTTP (its default
`auto` mode first probes the 2026 stateless `server/discover`, which this server does not speak,
then falls back to the `initialize` handshake), lists the tools and calls them; the SDK checks
every `structuredContent` against the tool's `outputSchema`. The oracle for which tools a dealer
has is its agent card (fetched with plain httpx), not the MCP server.

Prints one line per check and finally `mcp interop (python): N passed, M failed`; exits 1 on any
failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
import urllib.request
import uuid
from typing import Any

from mcp import Client

HANDSHAKE_VERSIONS = {"2025-11-25", "2025-06-18"}

passed = 0
failed = 0


def check(name: str, ok: bool, detail: Any = "") -> None:
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def card_tools(card_url: str, host: str | None) -> set[str]:
    request = urllib.request.Request(card_url, headers={"Host": host} if host else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        card = json.load(response)
    return {skill["id"].replace(".", "_") for skill in card["skills"]}


def text_of(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def aap_error(result: Any) -> dict[str, Any]:
    """The `aap.error` payload of a tool error (its second text block)."""
    return json.loads(result.content[1].text)


def lead(dealer: str, key: str, message: str, consent: bool = True) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "customer": {
            "first_name": "Mina",
            "last_name": "Okafor-Lindqvist",
            "email": "mina.interop@example.org",
            "phone": "+14155550199",
            "preferred_contact": "email",
        },
        "message": message,
        "source_agent": {"name": "mcp-python-interop"},
        "idempotency_key": key,
    }
    if consent:
        arguments["consent"] = {
            "granted_at": "2026-01-05T09:30:00Z",
            "allowed_channels": ["email", "phone"],
            "consent_text": f"I agree that {dealer} may contact me about this request.",
            "scope": ["lead_submission"],
        }
    return arguments


async def check_dealer(dealer: dict[str, Any]) -> None:
    name = dealer["id"]
    expected = card_tools(dealer["card_url"], dealer.get("host"))
    async with Client(dealer["mcp_url"]) as client:
        version = client.session.protocol_version
        check(f"{name}: initialize negotiated a handshake version", version in HANDSHAKE_VERSIONS, version)
        listed = await client.list_tools()
        names = {tool.name for tool in listed.tools}
        check(f"{name}: tools/list = the card's skills", names == expected, (names, expected))
        for tool in listed.tools:
            check(
                f"{name}: {tool.name} has object input and output schemas",
                tool.input_schema.get("type") == "object"
                and (tool.output_schema or {}).get("type") == "object",
                tool,
            )

        info = await client.call_tool("dealer_information", {})
        check(
            f"{name}: dealer_information",
            not info.is_error and info.structured_content.get("rooftops"),
            text_of(info),
        )

        search = await client.call_tool(
            "inventory_search",
            {"filters": {"condition": ["used", "cpo"]}, "pagination": {"limit": 3}},
        )
        data = search.structured_content or {}
        vehicles = data.get("vehicles", [])
        check(
            f"{name}: inventory_search (used and certified, 3 a page)",
            not search.is_error
            and 0 < len(vehicles) <= 3
            and data["total"] >= len(vehicles)
            and all(v["condition"] in ("used", "cpo") for v in vehicles),
            text_of(search),
        )

        facets = await client.call_tool("inventory_facets", {"filters": {"condition": ["used", "cpo"]}})
        check(
            f"{name}: inventory_facets",
            not facets.is_error
            and isinstance((facets.structured_content or {}).get("conditions"), list)
            and {c["value"] for c in facets.structured_content["conditions"]} <= {"used", "cpo"},
            text_of(facets),
        )

        if vehicles:
            vin = vehicles[0]["vin"]
            detail = await client.call_tool("inventory_vehicle", {"vin": vin})
            check(
                f"{name}: inventory_vehicle by VIN",
                not detail.is_error and detail.structured_content.get("vin") == vin,
                text_of(detail),
            )

        invalid = await client.call_tool("inventory_search", {"filters": {"make": "Toyota", "year_min": 1800}})
        error = aap_error(invalid) if invalid.is_error else {}
        fields = {e["instanceLocation"] for e in error.get("details", {}).get("errors", [])}
        check(
            f"{name}: a bad argument is a tool error with its field list",
            invalid.is_error
            and error.get("code") == "SCHEMA_VALIDATION_FAILED"
            and fields == {"/filters/make", "/filters/year_min"},
            text_of(invalid),
        )

        no_consent = await client.call_tool(
            "lead_submit", lead(name, f"py-{uuid.uuid4()}", "Call me.", consent=False)
        )
        check(
            f"{name}: a lead without consent is refused",
            no_consent.is_error and aap_error(no_consent).get("code") == "CONTACT_CONSENT_REQUIRED",
            text_of(no_consent),
        )

        key = f"py-{uuid.uuid4()}"
        first = await client.call_tool("lead_submit", lead(name, key, "Is the blue one still there?"))
        replay = await client.call_tool("lead_submit", lead(name, key, "Is the blue one still there?"))
        first_id = (first.structured_content or {}).get("lead_id")
        check(
            f"{name}: lead_submit received",
            not first.is_error and first.structured_content.get("status") == "received" and first_id,
            text_of(first),
        )
        check(
            f"{name}: the lead replayed with its key gives the same lead",
            not replay.is_error and replay.structured_content.get("lead_id") == first_id,
            text_of(replay),
        )
        changed = await client.call_tool("lead_submit", lead(name, key, "Another question."))
        check(
            f"{name}: the key reused for another lead is a conflict",
            changed.is_error and aap_error(changed).get("code") == "IDEMPOTENCY_CONFLICT",
            text_of(changed),
        )


async def check_throttle(dealer: dict[str, Any]) -> None:
    name = dealer["id"]
    async with Client(dealer["mcp_url"]) as client:
        first = await client.call_tool("dealer_information", {})
        check(f"{name}: first call within the quota", not first.is_error, text_of(first))
        second = await client.call_tool("dealer_information", {})
        error = aap_error(second) if second.is_error else {}
        check(
            f"{name}: second call is RATE_LIMITED with a retry hint",
            second.is_error
            and error.get("code") == "RATE_LIMITED"
            and error.get("retryable") is True
            and error.get("details", {}).get("retry_after_ms", 0) > 0,
            text_of(second),
        )


async def main() -> int:
    args = sys.argv[1:]
    throttle = args[:1] == ["--throttle"]
    if throttle:
        args = args[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        endpoints = json.load(f)
    for dealer in endpoints["dealers"]:
        if not dealer.get("mcp_url"):
            check(f"{dealer['id']}: mcp_url in the endpoints file", False, dealer)
            continue
        try:
            await (check_throttle if throttle else check_dealer)(dealer)
        except Exception as e:  # a crash is a failed check, with its trace
            traceback.print_exc()
            check(f"{dealer['id']}: no exception", False, repr(e))
    print(f"mcp interop (python): {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
