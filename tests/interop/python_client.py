#!/usr/bin/env python3
"""Interop check: the official Python A2A SDK (a2a-sdk, A2A v1.0) against aap-gateway.

Usage: python_client.py ENDPOINTS_FILE
       python_client.py --throttle STATUS ENDPOINTS_FILE   (see check_throttle)

ENDPOINTS_FILE is the JSON written by `aap-gateway demo --endpoints-file F`:
  {"gateway": ..., "dealers": [{"id", "card_url", "jsonrpc_url", "host"}, ...]}

For every dealer, only the SDK's own machinery talks to the gateway:
  * `A2ACardResolver` fetches and parses the agent card;
  * `ClientFactory` picks the JSONRPC interface from the card and builds the
    SDK's `JsonRpcTransport` (the factory also sets `A2A-Version: 1.0` as a
    default header on the httpx client it is given);
  * an SDK `ClientCallInterceptor` activates the card's required extensions
    (the AAP one) as the `A2A-Extensions` service parameter, built with the
    SDK's `ServiceParametersFactory` / `with_a2a_extensions`;
  * `Client.send_message` sends `SendMessage` with a DataPart built by
    `a2a.helpers.new_data_part`, and the SDK parses the reply / raises the
    typed error.
httpx event hooks only *observe* the wire (request headers, raw error body)
so the check can assert what was really sent and received.

Prints one line per check and finally `interop: N passed, M failed`;
exits 1 on any failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
import uuid

from typing import Any
from urllib.parse import urlsplit

import httpx

from a2a.client import (
    A2ACardResolver,
    ClientCallContext,
    ClientCallInterceptor,
    ClientConfig,
    ClientFactory,
)
from a2a.client.errors import A2AClientError
from a2a.client.interceptors import AfterArgs, BeforeArgs
from a2a.client.service_parameters import (
    ServiceParametersFactory,
    with_a2a_extensions,
)
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.client.transports.rest import RestTransport
from a2a.helpers import get_data_parts, new_data_part
from a2a.types import (
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    UnsupportedOperationError,
)
from a2a.utils.constants import TransportProtocol


AAP_URI_PREFIXES = (
    'https://autoagentprotocol.org/extensions/aap/',
    'https://draft.autoagentprotocol.invalid/extensions/aap/',
)
ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo'
AAP_ERROR_TYPE = 'https://autoagentprotocol.org/extensions/aap/error'

INFO_REQ_TYPE = 'dealer.information.request'
INFO_REQ_MEDIA = 'application/vnd.autoagent.dealer-information-request+json'
INFO_RESP_TYPE = 'dealer.information.response'
INFO_RESP_MEDIA = 'application/vnd.autoagent.dealer-information-response+json'

LEAD_REQ_TYPE = 'lead.submit.request'
LEAD_REQ_MEDIA = 'application/vnd.autoagent.lead-submit-request+json'
LEAD_RESP_MEDIA = 'application/vnd.autoagent.lead-submit-response+json'

HTTP_TIMEOUT_S = 20.0


class Results:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, ok: bool, detail: str = '') -> bool:
        if ok:
            self.passed += 1
            print(f'PASS {name}')
        else:
            self.failed += 1
            detail = ' '.join(detail.split())
            print(f'FAIL {name}' + (f': {detail}' if detail else ''))
        sys.stdout.flush()
        return ok


class RequiredExtensionsInterceptor(ClientCallInterceptor):
    """Activates every extension the agent card marks `required: true`.

    This is how a buyer agent that implements AAP opts in: it reads the card
    and sends the URIs in the `A2A-Extensions` service parameter, which the
    SDK's HTTP transports send as a request header.
    """

    async def before(self, args: BeforeArgs) -> None:
        uris = [
            ext.uri
            for ext in args.agent_card.capabilities.extensions
            if ext.required
        ]
        if not uris:
            return
        if args.context is None:
            args.context = ClientCallContext()
        args.context.service_parameters = ServiceParametersFactory.create_from(
            args.context.service_parameters, [with_a2a_extensions(uris)]
        )

    async def after(self, args: AfterArgs) -> None:
        return None


class WireLog:
    """httpx event hooks that record (never alter) what crosses the wire."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.responses: list[tuple[httpx.Response, bytes]] = []

    async def on_request(self, request: httpx.Request) -> None:
        self.requests.append(request)

    async def on_response(self, response: httpx.Response) -> None:
        body = await response.aread()
        self.responses.append((response, body))

    def last_post(self) -> tuple[httpx.Request | None, httpx.Response | None, bytes]:
        for response, body in reversed(self.responses):
            if response.request.method == 'POST':
                return response.request, response, body
        return None, None, b''


def aap_extension(card: Any) -> Any | None:
    exts = list(card.capabilities.extensions)
    if not exts:
        return None
    first = exts[0]
    if any(first.uri.startswith(p) for p in AAP_URI_PREFIXES):
        return first
    return None


def build_request(
    data: dict[str, Any],
    media_type: str,
    accepted: list[str],
    context_id: str | None = None,
) -> SendMessageRequest:
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[new_data_part(data, media_type=media_type)],
    )
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(accepted_output_modes=accepted),
    )


def unknown_skill_request() -> SendMessageRequest:
    """A request for a skill AAP does not define (the gateway answers UNSUPPORTED_SKILL)."""
    return build_request(
        {'type': 'inventory.compare.request'},
        'application/json',
        ['application/vnd.autoagent.inventory-compare-response+json'],
    )


async def send_one(client: Any, request: SendMessageRequest) -> Message:
    """Runs Client.send_message and returns the single reply Message."""
    events = [event async for event in client.send_message(request)]
    if len(events) != 1:
        raise AssertionError(f'expected 1 StreamResponse, got {len(events)}')
    event = events[0]
    if not event.HasField('message'):
        raise AssertionError(
            f'reply is not a Message (fields: {event.ListFields()!r})'
        )
    return event.message


def header_values(request: httpx.Request, name: str) -> list[str]:
    return [
        v.strip()
        for raw in request.headers.get_list(name)
        for v in raw.split(',')
        if v.strip()
    ]


async def check_dealer(dealer: dict[str, Any], res: Results) -> None:  # noqa: PLR0915
    did = dealer.get('id', '?')
    host = dealer.get('host')
    wire = WireLog()
    default_headers = {'Host': host} if host else {}

    async with httpx.AsyncClient(
        headers=default_headers,
        timeout=HTTP_TIMEOUT_S,
        event_hooks={
            'request': [wire.on_request],
            'response': [wire.on_response],
        },
    ) as http:
        # Non-streaming JSON-RPC only (AAP is message-only); the SDK would
        # switch to SendStreamingMessage if the card declared streaming.
        config = ClientConfig(
            httpx_client=http,
            streaming=False,
            supported_protocol_bindings=[TransportProtocol.JSONRPC],
        )
        factory = ClientFactory(config)  # sets A2A-Version: 1.0 on `http`

        # 1. Card, through the SDK's resolver.
        card_url = urlsplit(dealer['card_url'])
        base_url = f'{card_url.scheme}://{card_url.netloc}'
        resolver = A2ACardResolver(http, base_url, agent_card_path=card_url.path)
        try:
            card = await resolver.get_agent_card()
        except Exception as exc:  # noqa: BLE001
            res.check(f'{did}: card resolved by A2ACardResolver', False, repr(exc))
            return
        res.check(f'{did}: card resolved by A2ACardResolver', True)

        jsonrpc = [
            i for i in card.supported_interfaces
            if i.protocol_binding == TransportProtocol.JSONRPC
        ]
        res.check(
            f'{did}: card has a JSONRPC interface with protocolVersion 1.0',
            bool(jsonrpc) and jsonrpc[0].protocol_version == '1.0',
            f'interfaces={[(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces]}',
        )
        if jsonrpc and jsonrpc[0].url != dealer.get('jsonrpc_url'):
            print(f'note {did}: card JSONRPC url {jsonrpc[0].url} differs from '
                  f'endpoints jsonrpc_url {dealer.get("jsonrpc_url")}; the SDK uses the card')
        ext = aap_extension(card)
        if not res.check(
            f'{did}: capabilities.extensions[0] is the AAP extension, required',
            ext is not None and ext.required,
            f'extensions={[(e.uri, e.required) for e in card.capabilities.extensions]}',
        ):
            return
        aap_uri = ext.uri
        res.check(
            f'{did}: card does not declare streaming (SDK would switch to SendStreamingMessage)',
            not card.capabilities.streaming,
        )

        # 2. Client through the SDK's factory -> JSON-RPC transport.
        try:
            client = factory.create(card, interceptors=[RequiredExtensionsInterceptor()])
        except Exception as exc:  # noqa: BLE001
            res.check(f'{did}: ClientFactory.create', False, repr(exc))
            return
        transport = getattr(client, '_transport', None)
        res.check(
            f'{did}: ClientFactory chose the v1.0 JsonRpcTransport',
            type(transport) is JsonRpcTransport,
            f'got {type(transport).__name__}',
        )

        # 3. dealer.information
        request = build_request(
            {'type': INFO_REQ_TYPE}, INFO_REQ_MEDIA, [INFO_RESP_MEDIA]
        )
        context_id = ''
        try:
            reply = await send_one(client, request)
        except Exception as exc:  # noqa: BLE001
            res.check(f'{did}: dealer.information SendMessage', False,
                      f'{type(exc).__name__}: {exc}')
            reply = None
        if reply is not None:
            res.check(f'{did}: dealer.information SendMessage', True)
            sent, resp, _ = wire.last_post()
            if sent is not None:
                res.check(
                    f'{did}: request carried A2A-Version: 1.0',
                    sent.headers.get('A2A-Version') == '1.0',
                    f'A2A-Version={sent.headers.get("A2A-Version")!r}',
                )
                res.check(
                    f'{did}: request carried A2A-Extensions with the card URI',
                    aap_uri in header_values(sent, 'A2A-Extensions'),
                    f'A2A-Extensions={sent.headers.get_list("A2A-Extensions")!r}',
                )
                if host:
                    res.check(
                        f'{did}: request carried Host: {host}',
                        sent.headers.get('Host') == host,
                        f'Host={sent.headers.get("Host")!r}',
                    )
            if resp is not None:
                res.check(
                    f'{did}: reply echoes A2A-Extensions with the AAP URI',
                    aap_uri in [
                        v.strip()
                        for raw in resp.headers.get_list('A2A-Extensions')
                        for v in raw.split(',')
                    ],
                    f'A2A-Extensions={resp.headers.get_list("A2A-Extensions")!r}',
                )
            res.check(
                f'{did}: reply role is ROLE_AGENT',
                reply.role == Role.ROLE_AGENT,
                f'role={Role.Name(reply.role)}',
            )
            parts = get_data_parts(reply.parts)
            ok = (
                len(reply.parts) == 1
                and len(parts) == 1
                and isinstance(parts[0], dict)
                and parts[0].get('type') == INFO_RESP_TYPE
                and isinstance(parts[0].get('data'), dict)
            )
            res.check(
                f'{did}: reply is one DataPart of type {INFO_RESP_TYPE} with a data object',
                ok,
                f'parts={[str(p)[:300] for p in reply.parts]}',
            )
            res.check(
                f'{did}: reply part mediaType is {INFO_RESP_MEDIA}',
                len(reply.parts) >= 1 and reply.parts[0].media_type == INFO_RESP_MEDIA,
                f'mediaType={reply.parts[0].media_type if reply.parts else None!r}',
            )
            context_id = reply.context_id
            res.check(f'{did}: reply contextId is non-empty', bool(context_id))
            res.check(
                f'{did}: reply messageId is non-empty and new',
                bool(reply.message_id)
                and reply.message_id != request.message.message_id,
                f'messageId={reply.message_id!r}',
            )

        # 4. Same skill again inside the returned context: the gateway must
        #    keep the client's contextId.
        if context_id:
            request = build_request(
                {'type': INFO_REQ_TYPE}, INFO_REQ_MEDIA, [INFO_RESP_MEDIA],
                context_id=context_id,
            )
            try:
                reply = await send_one(client, request)
                res.check(
                    f'{did}: reply keeps the client-supplied contextId',
                    reply.context_id == context_id,
                    f'sent {context_id!r}, got {reply.context_id!r}',
                )
            except Exception as exc:  # noqa: BLE001
                res.check(f'{did}: reply keeps the client-supplied contextId',
                          False, f'{type(exc).__name__}: {exc}')

        # 5. An unknown skill -> typed -32004 UNSUPPORTED_SKILL.
        request = unknown_skill_request()
        error: Exception | None = None
        try:
            reply = await send_one(client, request)
        except Exception as exc:  # noqa: BLE001
            error = exc
        res.check(
            f'{did}: an unknown skill raises UnsupportedOperationError (-32004)',
            isinstance(error, UnsupportedOperationError),
            f'got {type(error).__name__ if error else "a reply"}: {error}'
            + (' (hint: the SDK loses the JSON-RPC code when the HTTP status is not 200)'
               if error is not None and 'HTTP Error' in str(error) else ''),
        )
        if isinstance(error, UnsupportedOperationError):
            # The SDK exposes the first ErrorInfo's metadata as `data`.
            meta = error.data if isinstance(error.data, dict) else {}
            res.check(
                f'{did}: SDK error data (ErrorInfo metadata) has code UNSUPPORTED_SKILL',
                meta.get('code') == 'UNSUPPORTED_SKILL',
                f'data={error.data!r}',
            )
            res.check(
                f'{did}: SDK error data retryable is the string "false"',
                meta.get('retryable') == 'false',
                f'data={error.data!r}',
            )
        _, resp, body = wire.last_post()
        try:
            envelope = json.loads(body)
        except ValueError:
            envelope = None
        err = envelope.get('error') if isinstance(envelope, dict) else None
        data = err.get('data') if isinstance(err, dict) else None
        data = data if isinstance(data, list) else []
        info = data[0] if data and isinstance(data[0], dict) else {}
        res.check(
            f'{did}: raw error.data starts with ErrorInfo UNSUPPORTED_SKILL / autoagentprotocol.org',
            info.get('@type') == ERROR_INFO_TYPE
            and info.get('reason') == 'UNSUPPORTED_SKILL'
            and info.get('domain') == 'autoagentprotocol.org',
            f'error={json.dumps(err)[:500] if err else body[:300]!r}',
        )
        aap = [d for d in data if isinstance(d, dict) and d.get('@type') == AAP_ERROR_TYPE]
        res.check(
            f'{did}: raw error.data holds the aap.error payload with code UNSUPPORTED_SKILL',
            len(aap) == 1 and aap[0].get('code') == 'UNSUPPORTED_SKILL'
            and aap[0].get('type') == 'aap.error',
            f'aap entries={aap!r}',
        )
        res.check(
            f'{did}: error reply is HTTP 200',
            resp is not None and resp.status_code == 200,
            f'status={resp.status_code if resp is not None else None}',
        )

        # 6. A lead through the SDK: delivered to the dealer's CRM, answered `received`.
        lead = {
            'type': LEAD_REQ_TYPE,
            'customer': {'first_name': 'Interop', 'last_name': 'Check',
                         'email': 'interop@example.com'},
            'consent': {'granted_at': '2026-04-30T10:16:00Z',
                        'allowed_channels': ['email'],
                        'consent_text': 'I agree to be contacted by e-mail about my enquiry.',
                        'scope': ['lead_submission']},
            'message': 'Interop check lead.',
            'source_agent': {'name': 'a2a-sdk-interop'},
            'idempotency_key': str(uuid.uuid4()),
        }
        try:
            reply = await send_one(client, build_request(lead, LEAD_REQ_MEDIA, [LEAD_RESP_MEDIA]))
            parts = get_data_parts(reply.parts)
            payload = parts[0] if parts and isinstance(parts[0], dict) else {}
            data = payload.get('data') if isinstance(payload.get('data'), dict) else {}
            res.check(
                f'{did}: lead.submit is answered received with a lead_id',
                payload.get('type') == 'lead.submit.response'
                and data.get('status') == 'received' and bool(data.get('lead_id')),
                f'payload={payload!r}',
            )
        except Exception as exc:  # noqa: BLE001
            res.check(f'{did}: lead.submit is answered received with a lead_id', False,
                      f'{type(exc).__name__}: {exc}')

        # 7. A lead without consent never reaches the CRM: CONTACT_CONSENT_REQUIRED (-32000).
        no_consent = {k: v for k, v in lead.items() if k not in ('consent', 'idempotency_key')}
        error = None
        try:
            await send_one(client, build_request(no_consent, LEAD_REQ_MEDIA, [LEAD_RESP_MEDIA]))
        except Exception as exc:  # noqa: BLE001
            error = exc
        _, resp, body = wire.last_post()
        try:
            envelope = json.loads(body)
        except ValueError:
            envelope = None
        err = envelope.get('error') if isinstance(envelope, dict) else None
        data = err.get('data') if isinstance(err, dict) else None
        data = data if isinstance(data, list) else []
        aap = [d for d in data if isinstance(d, dict) and d.get('@type') == AAP_ERROR_TYPE]
        res.check(
            f'{did}: a lead without consent is refused with CONTACT_CONSENT_REQUIRED (-32000)',
            error is not None and isinstance(err, dict) and err.get('code') == -32000
            and len(aap) == 1 and aap[0].get('code') == 'CONTACT_CONSENT_REQUIRED',
            f'error={error!r} raw={json.dumps(err)[:400] if err else body[:300]!r}',
        )

        await client.close()  # shared httpx client: closed by the async with


async def check_rest(dealer: dict[str, Any], res: Results) -> None:
    """The same card through the SDK's HTTP+JSON transport (`POST …/message:send`)."""
    did = dealer.get('id', '?') + ' (HTTP+JSON)'
    host = dealer.get('host')
    wire = WireLog()
    async with httpx.AsyncClient(
        headers={'Host': host} if host else {},
        timeout=HTTP_TIMEOUT_S,
        event_hooks={'request': [wire.on_request], 'response': [wire.on_response]},
    ) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=False,
            supported_protocol_bindings=[TransportProtocol.HTTP_JSON],
        )
        factory = ClientFactory(config)
        card_url = urlsplit(dealer['card_url'])
        resolver = A2ACardResolver(
            http, f'{card_url.scheme}://{card_url.netloc}', agent_card_path=card_url.path
        )
        card = await resolver.get_agent_card()
        bindings = [i.protocol_binding for i in card.supported_interfaces]
        if not res.check(
            f'{did}: the card lists HTTP+JSON after JSONRPC',
            bindings[:2] == [TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON],
            f'interfaces={bindings}',
        ):
            return
        client = factory.create(card, interceptors=[RequiredExtensionsInterceptor()])
        transport = getattr(client, '_transport', None)
        res.check(
            f'{did}: ClientFactory chose the RestTransport',
            type(transport) is RestTransport,
            f'got {type(transport).__name__}',
        )
        request = build_request({'type': INFO_REQ_TYPE}, INFO_REQ_MEDIA, [INFO_RESP_MEDIA])
        try:
            reply = await send_one(client, request)
            parts = get_data_parts(reply.parts)
            res.check(
                f'{did}: dealer.information through message:send',
                bool(parts) and parts[0].get('type') == 'dealer.information.response',
                f'parts={parts!r}'[:300],
            )
        except Exception as exc:  # noqa: BLE001
            res.check(f'{did}: dealer.information through message:send', False,
                      f'{type(exc).__name__}: {exc}')
        sent, _, _ = wire.last_post()
        res.check(
            f'{did}: POSTed to …/message:send',
            sent is not None and sent.url.path.endswith('/message:send'),
            f'url={sent.url if sent is not None else None}',
        )
        # An unknown skill: 404 with a google.rpc.Status carrying the AAP entries.
        request = unknown_skill_request()
        error: Exception | None = None
        try:
            await send_one(client, request)
        except Exception as exc:  # noqa: BLE001
            error = exc
        res.check(f'{did}: an unknown skill raises an SDK error', error is not None)
        _, resp, body = wire.last_post()
        try:
            status = json.loads(body).get('error', {})
        except (ValueError, AttributeError):
            status = {}
        details = status.get('details') if isinstance(status.get('details'), list) else []
        info = details[0] if details and isinstance(details[0], dict) else {}
        aap = [d for d in details if isinstance(d, dict) and d.get('@type') == AAP_ERROR_TYPE]
        res.check(
            f'{did}: UNSUPPORTED_SKILL is HTTP 404 with google.rpc.Status code 404',
            resp is not None and resp.status_code == 404 and status.get('code') == 404,
            f'status={resp.status_code if resp is not None else None} body={body[:300]!r}',
        )
        res.check(
            f'{did}: details[] = ErrorInfo UNSUPPORTED_SKILL first, then aap.error',
            info.get('@type') == ERROR_INFO_TYPE
            and info.get('reason') == 'UNSUPPORTED_SKILL'
            and len(aap) == 1 and aap[0].get('code') == 'UNSUPPORTED_SKILL',
            f'details={details!r}'[:500],
        )
        await client.close()


async def check_throttle(dealer: dict[str, Any], res: Results, status: int) -> None:
    """`--throttle STATUS`: against a gateway whose quota is one call (run.sh starts it with
    `bindings.jsonrpc.rate_limited_status` = STATUS), the second call is RATE_LIMITED. Records
    what a buyer using this SDK sees (docs/protocol.md §Rate limits): the JSON-RPC transport
    calls `raise_for_status()` before reading the body, so with 429 the -32000 error, its
    `error.data` and the retry hint are lost; with 200 the SDK raises the JSON-RPC error."""
    did = f'{dealer.get("id", "?")} (rate_limited_status {status})'
    host = dealer.get('host')
    wire = WireLog()
    async with httpx.AsyncClient(
        headers={'Host': host} if host else {},
        timeout=HTTP_TIMEOUT_S,
        event_hooks={'request': [wire.on_request], 'response': [wire.on_response]},
    ) as http:
        config = ClientConfig(
            httpx_client=http,
            streaming=False,
            supported_protocol_bindings=[TransportProtocol.JSONRPC],
        )
        factory = ClientFactory(config)
        card_url = urlsplit(dealer['card_url'])
        resolver = A2ACardResolver(
            http, f'{card_url.scheme}://{card_url.netloc}', agent_card_path=card_url.path
        )
        card = await resolver.get_agent_card()
        client = factory.create(card, interceptors=[RequiredExtensionsInterceptor()])

        def request() -> SendMessageRequest:
            return build_request({'type': INFO_REQ_TYPE}, INFO_REQ_MEDIA, [INFO_RESP_MEDIA])

        await send_one(client, request())
        res.check(f'{did}: the first call is answered', True)
        error: Exception | None = None
        try:
            await send_one(client, request())
        except Exception as exc:  # noqa: BLE001
            error = exc
        _, resp, body = wire.last_post()
        try:
            envelope = json.loads(body)
        except ValueError:
            envelope = {}
        res.check(
            f'{did}: the wire reply is HTTP {status} with Retry-After and the JSON-RPC -32000 body',
            resp is not None
            and resp.status_code == status
            and int(resp.headers.get('Retry-After', '0')) >= 1
            and envelope.get('error', {}).get('code') == -32000,
            f'status={resp.status_code if resp is not None else None} body={body[:200]!r}',
        )
        text = str(error)
        if status == 200:
            res.check(
                f'{did}: the SDK raises the JSON-RPC error (-32000, its message)',
                isinstance(error, A2AClientError)
                and '-32000' in text
                and 'Rate limit exceeded' in text,
                f'{type(error).__name__}: {text}',
            )
        else:
            # The documented loss: only the HTTP status reaches the buyer.
            res.check(
                f'{did}: the SDK raises a bare HTTP error (the JSON-RPC body is lost)',
                isinstance(error, A2AClientError)
                and 'HTTP Error 429' in text
                and '-32000' not in text,
                f'{type(error).__name__}: {text}',
            )
        print(f'finding {did}: a buyer sees {type(error).__name__}: {text}'[:300])
        await client.close()


async def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == '--throttle':
        with open(argv[3], encoding='utf-8') as f:
            endpoints = json.load(f)
        res = Results()
        dealers = endpoints.get('dealers') or []
        if res.check('endpoints file lists at least one dealer', bool(dealers)):
            try:
                await check_throttle(dealers[0], res, int(argv[2]))
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                res.check('throttle: unexpected exception', False, repr(exc))
        print(f'interop throttle: {res.passed} passed, {res.failed} failed')
        return 0 if res.failed == 0 and res.passed > 0 else 1
    if len(argv) != 2:
        print(f'usage: {argv[0]} ENDPOINTS_FILE | --throttle STATUS ENDPOINTS_FILE',
              file=sys.stderr)
        return 2
    with open(argv[1], encoding='utf-8') as f:
        endpoints = json.load(f)
    res = Results()
    dealers = endpoints.get('dealers') or []
    res.check('endpoints file lists at least one dealer', bool(dealers))
    for dealer in dealers:
        try:
            await check_dealer(dealer, res)
            if dealer.get('http_json_url'):
                await check_rest(dealer, res)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            res.check(f'{dealer.get("id", "?")}: unexpected exception', False, repr(exc))
    print(f'interop: {res.passed} passed, {res.failed} failed')
    return 0 if res.failed == 0 and res.passed > 0 else 1


if __name__ == '__main__':
    sys.exit(asyncio.run(main(sys.argv)))
