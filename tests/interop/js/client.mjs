#!/usr/bin/env node
// Interop check: the official JavaScript A2A SDK (@a2a-js/sdk, A2A v1.0) against aap-gateway.
//
// Usage: node client.mjs ENDPOINTS_FILE
//        node client.mjs --throttle STATUS ENDPOINTS_FILE   (see checkThrottle)
//
// ENDPOINTS_FILE is the JSON written by `aap-gateway demo --endpoints-file F`:
//   {"gateway": ..., "dealers": [{"id", "card_url", "jsonrpc_url", "http_json_url", "host"}, ...]}
//
// For every dealer, only the SDK's own machinery talks to the gateway:
//   * `DefaultAgentCardResolver` fetches and parses the agent card (it sends `A2A-Version: 1.0`);
//   * `ClientFactory` (JSON-RPC and HTTP+JSON transport factories registered) picks the
//     transport from the card: JSONRPC by the card's preference order, and HTTP+JSON when
//     `preferredTransports` asks for it;
//   * an SDK `CallInterceptor` activates the extensions the card marks `required` (the AAP one)
//     as the `A2A-Extensions` service parameter, built with the SDK's `ServiceParameters` /
//     `withA2AExtensions`; the SDK's `Client` adds `A2A-Version: 1.0` itself;
//   * `Client.sendMessage` sends `SendMessage` (JSON-RPC) or `POST …/message:send` (REST) with a
//     DataPart, and the SDK parses the reply or raises its typed error.
// The `fetchImpl` handed to the resolver and the transport factories only *observes* the wire
// (request headers and body, response status, headers and body); it never alters a request.
//
// SDK limitations worked around here (not gateway bugs):
//   * WHATWG fetch treats `Host` as a forbidden header and Node's fetch silently drops it, so
//     unlike the Python client this one cannot pin `Host: <dealer host>`; it uses the card's
//     interface URL as is (the demo maps 127.0.0.1 to the same dealer as `localhost`). The
//     check that the reply comes from the right dealer is made on the payload instead.
//   * The SDK keeps the JSON-RPC `error.data` array on its errors (`err.data`) but maps
//     `google.rpc.ErrorInfo` only for A2A reasons; an AAP error over HTTP+JSON becomes a generic
//     `A2AError` carrying just the message and HTTP status, so the REST checks read the AAP
//     entries from the raw body seen by the observing fetch (buyers parse the raw envelope:
//     docs/protocol.md §Error data array).
//
// Prints one line per check and finally `interop-js: N passed, M failed`; exits 1 on any failure.

import { readFile } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';

import {
  A2A_PROTOCOL_VERSION,
  A2A_VERSION_HEADER,
  Extensions,
  HTTP_EXTENSION_HEADER,
  Role,
  roleToJSON,
} from '@a2a-js/sdk';
import {
  ClientFactory,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
  ServiceParameters,
  withA2AExtensions,
} from '@a2a-js/sdk/client';
import {
  A2A_ERROR_CODE,
  A2AError,
  ContentTypeNotSupportedError,
  ExtensionSupportRequiredError,
  JsonRpcTransportError,
  RequestMalformedError,
  UnsupportedOperationError,
  isJsonRpcError,
  isRestError,
} from '@a2a-js/sdk/errors';

const AAP_URI_PREFIXES = [
  'https://autoagentprotocol.org/extensions/aap/',
  'https://draft.autoagentprotocol.invalid/extensions/aap/',
];
const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
const BAD_REQUEST_TYPE = 'type.googleapis.com/google.rpc.BadRequest';
const AAP_ERROR_TYPE = 'https://autoagentprotocol.org/extensions/aap/error';
const AAP_DOMAIN = 'autoagentprotocol.org';
const A2A_DOMAIN = 'a2a-protocol.org';
// AAP business errors (docs/protocol.md §AAP error codes); not an A2A code.
const AAP_BUSINESS_ERROR = -32000;

const skill = (slug, type) => ({
  request: `${type}.request`,
  response: `${type}.response`,
  requestMedia: `application/vnd.autoagent.${slug}-request+json`,
  responseMedia: `application/vnd.autoagent.${slug}-response+json`,
});
const INFO = skill('dealer-information', 'dealer.information');
const FACETS = skill('inventory-facets', 'inventory.facets');
const SEARCH = skill('inventory-search', 'inventory.search');
const VEHICLE = skill('vehicle-detail', 'inventory.vehicle'); // slug is vehicle-detail (docs/protocol.md §Skills)
const LEAD = skill('lead-submit', 'lead.submit');
// A skill AAP does not define, as the Python client sends it: a generic `application/json` part
// whose `data.type` names the skill -> UNSUPPORTED_SKILL. (With a made-up AAP-looking media type
// the gateway answers -32005 first: docs/protocol.md §Order of checks, step 7; checked
// separately.)
const UNKNOWN = { ...skill('inventory-compare', 'inventory.compare'), requestMedia: 'application/json' };
const UNKNOWN_MEDIA = skill('inventory-compare', 'inventory.compare');

const HTTP_TIMEOUT_MS = 20_000;
const WATCHDOG_MS = 180_000;
const PAGE = 3;
// Valid VIN pattern, not in any demo inventory.
const MISSING_VIN = '1HGCY2F57RA999999';

// --- results -------------------------------------------------------------------------------

class Results {
  passed = 0;
  failed = 0;

  check(name, ok, detail = '') {
    if (ok) {
      this.passed += 1;
      console.log(`PASS ${name}`);
    } else {
      this.failed += 1;
      const d = String(detail).split(/\s+/).join(' ').trim();
      console.log(`FAIL ${name}${d ? `: ${d}` : ''}`);
    }
    return Boolean(ok);
  }
}

// --- the wire, observed --------------------------------------------------------------------

/** A `fetch` for the SDK that records (never alters) each exchange. */
class WireLog {
  exchanges = [];

  fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    const requestBody = typeof init?.body === 'string' ? init.body : undefined;
    const response = await fetch(input, init);
    // A clone, so the SDK still reads the original body.
    const body = await response.clone().text();
    this.exchanges.push({ url, method, headers, requestBody, response, body });
    return response;
  };

  lastPost() {
    for (let i = this.exchanges.length - 1; i >= 0; i -= 1) {
      if (this.exchanges[i].method === 'POST') return this.exchanges[i];
    }
    return undefined;
  }

  lastGet() {
    for (let i = this.exchanges.length - 1; i >= 0; i -= 1) {
      if (this.exchanges[i].method === 'GET') return this.exchanges[i];
    }
    return undefined;
  }
}

const headerList = (headers, name) =>
  Extensions.parseServiceParameter(headers?.get(name) ?? '');

const parseJson = (text) => {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
};

const short = (value, n = 400) => {
  const s = typeof value === 'string' ? value : JSON.stringify(value);
  return s === undefined ? String(value) : s.slice(0, n);
};

const describe = (err) =>
  err === undefined ? 'no error (a reply)' : `${err?.name ?? typeof err}: ${err?.message ?? err}`;

// --- the SDK side --------------------------------------------------------------------------

/**
 * Activates every extension the agent card marks `required: true`.
 *
 * This is how a buyer agent that implements AAP opts in: it reads the card and sends the URIs
 * in the `A2A-Extensions` service parameter, which the SDK's HTTP transports send as a header.
 */
class RequiredExtensionsInterceptor {
  async before(args) {
    const uris = (args.agentCard.capabilities?.extensions ?? [])
      .filter((ext) => ext.required)
      .map((ext) => ext.uri);
    if (uris.length === 0) return;
    const current = Extensions.parseServiceParameter(
      args.options?.serviceParameters?.[HTTP_EXTENSION_HEADER],
    );
    const merged = uris.reduce((acc, uri) => Extensions.createFrom(acc, uri), current);
    args.options = {
      ...args.options,
      serviceParameters: ServiceParameters.createFrom(
        args.options?.serviceParameters,
        withA2AExtensions(...merged),
      ),
    };
  }

  async after() {}
}

/** A `SendMessageRequest` (the SDK's typed form) carrying one AAP DataPart. */
function buildRequest(data, sk, contextId = '') {
  return {
    tenant: '',
    message: {
      messageId: randomUUID(),
      contextId,
      taskId: '',
      role: Role.ROLE_USER,
      parts: [
        {
          content: { $case: 'data', value: data },
          mediaType: sk.requestMedia,
          filename: '',
          metadata: undefined,
        },
      ],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: {
      acceptedOutputModes: [sk.responseMedia],
      taskPushNotificationConfig: undefined,
      historyLength: undefined,
      returnImmediately: false,
    },
    metadata: undefined,
  };
}

/** Runs Client.sendMessage and returns the reply Message (AAP never answers with a Task). */
async function sendOne(client, request) {
  const result = await client.sendMessage(request, {
    signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
  });
  if (!result || !('messageId' in result)) {
    throw new Error(`reply is not a Message: ${short(result, 300)}`);
  }
  return result;
}

/** Sends and returns the error the SDK raised (undefined when it answered). */
async function sendForError(client, request) {
  try {
    await sendOne(client, request);
    return undefined;
  } catch (err) {
    return err;
  }
}

const dataParts = (message) =>
  (message?.parts ?? []).filter((p) => p.content?.$case === 'data').map((p) => p.content.value);

/** The AAP payload of a reply: first part is a DataPart `{type, data}` of the expected type. */
function aapPayload(message, sk) {
  const first = message?.parts?.[0];
  const value = first?.content?.$case === 'data' ? first.content.value : undefined;
  const ok =
    value !== null &&
    typeof value === 'object' &&
    value.type === sk.response &&
    value.data !== null &&
    typeof value.data === 'object';
  return { ok, value, data: ok ? value.data : undefined, mediaType: first?.mediaType };
}

function aapCard(card) {
  const first = card?.capabilities?.extensions?.[0];
  if (first && AAP_URI_PREFIXES.some((p) => String(first.uri).startsWith(p))) return first;
  return undefined;
}

function checkReply(res, label, reply, sk) {
  const payload = aapPayload(reply, sk);
  res.check(
    `${label}: reply's first part is a DataPart of type ${sk.response} with a data object`,
    payload.ok,
    `parts=${short(reply?.parts, 300)}`,
  );
  res.check(
    `${label}: reply part mediaType is ${sk.responseMedia}`,
    payload.mediaType === sk.responseMedia,
    `mediaType=${JSON.stringify(payload.mediaType)}`,
  );
  return payload;
}

/** The checks every AAP error shares: ErrorInfo first (domain, code, retryable), aap.error by @type. */
function checkAapErrorData(res, label, details, code, retryable = false) {
  const list = Array.isArray(details) ? details : [];
  const info = list[0] ?? {};
  res.check(
    `${label}: details start with ErrorInfo ${code} / ${AAP_DOMAIN}, metadata code and retryable "${retryable}"`,
    info['@type'] === ERROR_INFO_TYPE &&
      info.reason === code &&
      info.domain === AAP_DOMAIN &&
      info.metadata?.code === code &&
      info.metadata?.retryable === String(retryable),
    `first=${short(info, 300)}`,
  );
  const aap = list.filter((d) => d && d['@type'] === AAP_ERROR_TYPE);
  res.check(
    `${label}: details hold one aap.error with code ${code}, retryable ${retryable}`,
    aap.length === 1 &&
      aap[0].type === 'aap.error' &&
      aap[0].code === code &&
      aap[0].retryable === retryable &&
      typeof aap[0].error_id === 'string' &&
      aap[0].error_id === info.metadata?.error_id,
    `aap=${short(aap, 400)}`,
  );
  return aap[0];
}

// --- JSON-RPC ------------------------------------------------------------------------------

async function checkDealer(dealer, res) {
  const did = dealer.id ?? '?';
  const wire = new WireLog();
  const resolver = new DefaultAgentCardResolver({ fetchImpl: wire.fetch });
  const transports = [
    new JsonRpcTransportFactory({ fetchImpl: wire.fetch }),
    new RestTransportFactory({ fetchImpl: wire.fetch }),
  ];

  // 1. Card, through the SDK's resolver.
  const cardUrl = new URL(dealer.card_url);
  let card;
  try {
    card = await resolver.resolve(cardUrl.origin, cardUrl.pathname);
  } catch (err) {
    res.check(`${did}: card resolved by DefaultAgentCardResolver`, false, describe(err));
    return;
  }
  res.check(`${did}: card resolved by DefaultAgentCardResolver`, true);
  const cardGet = wire.lastGet();
  res.check(
    `${did}: card request carried A2A-Version: 1.0`,
    cardGet?.headers.get(A2A_VERSION_HEADER) === '1.0',
    `A2A-Version=${JSON.stringify(cardGet?.headers.get(A2A_VERSION_HEADER))}`,
  );

  const interfaces = card.supportedInterfaces ?? [];
  const jsonrpc = interfaces.filter((i) => i.protocolBinding === 'JSONRPC');
  res.check(
    `${did}: card lists JSONRPC first, with protocolVersion 1.0`,
    interfaces[0]?.protocolBinding === 'JSONRPC' && interfaces[0]?.protocolVersion === '1.0',
    `interfaces=${short(interfaces.map((i) => [i.url, i.protocolBinding, i.protocolVersion]))}`,
  );
  if (jsonrpc[0] && jsonrpc[0].url !== dealer.jsonrpc_url) {
    console.log(
      `note ${did}: card JSONRPC url ${jsonrpc[0].url} differs from endpoints jsonrpc_url ` +
        `${dealer.jsonrpc_url}; the SDK uses the card`,
    );
  }
  const ext = aapCard(card);
  if (
    !res.check(
      `${did}: capabilities.extensions[0] is the AAP extension, required`,
      ext !== undefined && ext.required === true,
      `extensions=${short((card.capabilities?.extensions ?? []).map((e) => [e.uri, e.required]))}`,
    )
  ) {
    return;
  }
  const aapUri = ext.uri;
  res.check(
    `${did}: card does not declare streaming (sendMessageStream would use SendStreamingMessage)`,
    !card.capabilities?.streaming,
  );

  // 2. Client through the SDK's factory: the card's first interface (JSONRPC) wins.
  let client;
  try {
    const factory = new ClientFactory({
      transports,
      cardResolver: resolver,
      clientConfig: { interceptors: [new RequiredExtensionsInterceptor()] },
    });
    client = await factory.createFromAgentCard(card);
  } catch (err) {
    res.check(`${did}: ClientFactory.createFromAgentCard`, false, describe(err));
    return;
  }
  res.check(
    `${did}: ClientFactory chose the v1.0 JSON-RPC transport`,
    client.transport.protocolName === 'JSONRPC' &&
      client.protocolVersion === A2A_PROTOCOL_VERSION &&
      !client.transport.constructor.name.startsWith('Legacy'),
    `got ${client.transport.constructor.name} ${client.transport.protocolName} ${client.protocolVersion}`,
  );

  // 3. dealer.information
  let request = buildRequest({ type: INFO.request }, INFO);
  let contextId = '';
  let reply;
  try {
    reply = await sendOne(client, request);
    res.check(`${did}: dealer.information SendMessage`, true);
  } catch (err) {
    res.check(`${did}: dealer.information SendMessage`, false, describe(err));
  }
  if (reply) {
    const sent = wire.lastPost();
    const body = parseJson(sent?.requestBody ?? '') ?? {};
    const part = body.params?.message?.parts?.[0] ?? {};
    res.check(
      `${did}: POSTed to the card's JSONRPC url`,
      sent?.url === jsonrpc[0]?.url,
      `url=${sent?.url}`,
    );
    res.check(
      `${did}: request body is v1.0 ProtoJSON (method SendMessage, role ROLE_USER, part {data, mediaType} without kind)`,
      body.jsonrpc === '2.0' &&
        body.method === 'SendMessage' &&
        body.params?.message?.role === 'ROLE_USER' &&
        part.data?.type === INFO.request &&
        part.mediaType === INFO.requestMedia &&
        !('kind' in part) &&
        !('kind' in (body.params?.message ?? {})) &&
        body.params?.configuration?.acceptedOutputModes?.[0] === INFO.responseMedia,
      `body=${short(body, 400)}`,
    );
    res.check(
      `${did}: request carried A2A-Version: 1.0`,
      sent?.headers.get(A2A_VERSION_HEADER) === '1.0',
      `A2A-Version=${JSON.stringify(sent?.headers.get(A2A_VERSION_HEADER))}`,
    );
    res.check(
      `${did}: request carried A2A-Extensions with the card URI`,
      headerList(sent?.headers, HTTP_EXTENSION_HEADER).includes(aapUri),
      `A2A-Extensions=${JSON.stringify(sent?.headers.get(HTTP_EXTENSION_HEADER))}`,
    );
    res.check(
      `${did}: reply echoes A2A-Extensions with the AAP URI`,
      headerList(sent?.response.headers, HTTP_EXTENSION_HEADER).includes(aapUri),
      `A2A-Extensions=${JSON.stringify(sent?.response.headers.get(HTTP_EXTENSION_HEADER))}`,
    );
    res.check(
      `${did}: reply role is ROLE_AGENT`,
      reply.role === Role.ROLE_AGENT,
      `role=${roleToJSON(reply.role)}`,
    );
    res.check(
      `${did}: reply has exactly one part`,
      reply.parts.length === 1 && dataParts(reply).length === 1,
      `parts=${short(reply.parts, 300)}`,
    );
    const payload = checkReply(res, `${did}: dealer.information`, reply, INFO);
    // Node's fetch cannot pin the Host header (see the top of the file): check the payload
    // instead that the gateway routed the call to the card's dealer.
    res.check(
      `${did}: dealer.information names the card's dealer`,
      payload.data?.name === card.name,
      `card.name=${JSON.stringify(card.name)} data.name=${JSON.stringify(payload.data?.name)}`,
    );
    contextId = reply.contextId;
    res.check(`${did}: reply contextId is non-empty`, Boolean(contextId));
    res.check(
      `${did}: reply messageId is non-empty and new`,
      Boolean(reply.messageId) && reply.messageId !== request.message.messageId,
      `messageId=${JSON.stringify(reply.messageId)}`,
    );
  }

  // 4. Same skill again inside the returned context: the gateway keeps the client's contextId.
  if (contextId) {
    try {
      reply = await sendOne(client, buildRequest({ type: INFO.request }, INFO, contextId));
      res.check(
        `${did}: reply keeps the client-supplied contextId`,
        reply.contextId === contextId,
        `sent ${contextId}, got ${reply.contextId}`,
      );
    } catch (err) {
      res.check(`${did}: reply keeps the client-supplied contextId`, false, describe(err));
    }
  }

  // 5. inventory.facets over the whole inventory.
  let topMake;
  try {
    reply = await sendOne(client, buildRequest({ type: FACETS.request }, FACETS));
    const { data } = checkReply(res, `${did}: inventory.facets`, reply, FACETS);
    const makes = Array.isArray(data?.makes) ? data.makes : [];
    topMake = makes[0];
    res.check(
      `${did}: inventory.facets lists makes with counts`,
      makes.length > 0 && makes.every((m) => typeof m.value === 'string' && Number.isInteger(m.count)),
      `makes=${short(makes, 200)}`,
    );
  } catch (err) {
    res.check(`${did}: inventory.facets SendMessage`, false, describe(err));
  }

  // 6. inventory.search with filters, sort and pagination (two pages).
  let vehicle;
  if (topMake) {
    const search = (skip) =>
      buildRequest(
        {
          type: SEARCH.request,
          filters: { make: [topMake.value] },
          pagination: { skip, limit: PAGE },
          sort: { field: 'price', order: 'asc' },
          privacy: { anonymous: true },
        },
        SEARCH,
      );
    let firstPage = [];
    try {
      reply = await sendOne(client, search(0));
      const { data } = checkReply(res, `${did}: inventory.search`, reply, SEARCH);
      const vehicles = Array.isArray(data?.vehicles) ? data.vehicles : [];
      firstPage = vehicles;
      vehicle = vehicles.find((v) => typeof v.vin === 'string' && v.vin);
      res.check(
        `${did}: inventory.search echoes skip 0 / limit ${PAGE} and returns at most ${PAGE} vehicles`,
        data?.skip === 0 && data?.limit === PAGE && vehicles.length > 0 && vehicles.length <= PAGE,
        `skip=${data?.skip} limit=${data?.limit} n=${vehicles.length}`,
      );
      res.check(
        `${did}: inventory.search total equals the facets count for make ${topMake.value}`,
        data?.total === topMake.count,
        `total=${data?.total} facet count=${topMake.count}`,
      );
      res.check(
        `${did}: every vehicle matches the make filter and has status and condition`,
        vehicles.every(
          (v) => v.make === topMake.value && v.status && ['new', 'used', 'cpo'].includes(v.condition),
        ),
        `vehicles=${short(vehicles.map((v) => [v.vin, v.make, v.status, v.condition]))}`,
      );
      const prices = vehicles.filter((v) => Number.isInteger(v.price)).map((v) => v.price);
      res.check(
        `${did}: inventory.search sorted by price asc`,
        prices.every((p, i) => i === 0 || prices[i - 1] <= p),
        `prices=${short(prices)}`,
      );
    } catch (err) {
      res.check(`${did}: inventory.search SendMessage`, false, describe(err));
    }
    if (firstPage.length === PAGE && topMake.count > PAGE) {
      try {
        reply = await sendOne(client, search(PAGE));
        const { data } = aapPayload(reply, SEARCH);
        const seen = new Set(firstPage.map((v) => v.vin ?? v.stock ?? v.vehicle_id));
        const next = Array.isArray(data?.vehicles) ? data.vehicles : [];
        res.check(
          `${did}: inventory.search page 2 (skip ${PAGE}) echoes skip and repeats no page-1 vehicle`,
          data?.skip === PAGE &&
            next.length > 0 &&
            next.every((v) => !seen.has(v.vin ?? v.stock ?? v.vehicle_id)),
          `skip=${data?.skip} page1=${short([...seen])} page2=${short(next.map((v) => v.vin))}`,
        );
      } catch (err) {
        res.check(`${did}: inventory.search page 2`, false, describe(err));
      }
    }
  }

  // 7. inventory.vehicle with a VIN from the search reply.
  if (res.check(`${did}: inventory.search returned a vehicle with a VIN`, Boolean(vehicle))) {
    try {
      reply = await sendOne(client, buildRequest({ type: VEHICLE.request, vin: vehicle.vin }, VEHICLE));
      const { data } = checkReply(res, `${did}: inventory.vehicle`, reply, VEHICLE);
      res.check(
        `${did}: inventory.vehicle returns VIN ${vehicle.vin} with status and condition`,
        data?.vin === vehicle.vin && Boolean(data?.status) && Boolean(data?.condition),
        `data=${short(data, 300)}`,
      );
    } catch (err) {
      res.check(`${did}: inventory.vehicle SendMessage`, false, describe(err));
    }
  }

  // 8. A VIN no listing has: VEHICLE_NOT_FOUND (-32000). The SDK has no class for -32000: it
  //    raises its generic JsonRpcTransportError and keeps the error.data array.
  let error = await sendForError(
    client,
    buildRequest({ type: VEHICLE.request, vin: MISSING_VIN }, VEHICLE),
  );
  res.check(
    `${did}: an unknown VIN raises JsonRpcTransportError with code -32000`,
    error instanceof JsonRpcTransportError &&
      isJsonRpcError(error) &&
      error.envelopeCode === AAP_BUSINESS_ERROR,
    describe(error),
  );
  checkAapErrorData(res, `${did}: VEHICLE_NOT_FOUND`, error?.data, 'VEHICLE_NOT_FOUND');

  // 9. Schema violations: SCHEMA_VALIDATION_FAILED (-32602) -> the SDK's RequestMalformedError,
  //    every failure reported at once.
  error = await sendForError(
    client,
    buildRequest(
      {
        type: SEARCH.request,
        filters: { year_min: '2020', condition: ['brand_new'] },
        colour: 'red',
      },
      SEARCH,
    ),
  );
  res.check(
    `${did}: an invalid search raises RequestMalformedError (-32602)`,
    error instanceof RequestMalformedError &&
      isJsonRpcError(error) &&
      error.envelopeCode === A2A_ERROR_CODE.INVALID_PARAMS,
    describe(error),
  );
  const validation = checkAapErrorData(
    res,
    `${did}: SCHEMA_VALIDATION_FAILED`,
    error?.data,
    'SCHEMA_VALIDATION_FAILED',
  );
  const badRequest = (Array.isArray(error?.data) ? error.data : []).find(
    (d) => d && d['@type'] === BAD_REQUEST_TYPE,
  );
  const locations = (validation?.details?.errors ?? []).map((e) => e.instanceLocation).sort();
  const expected = ['/colour', '/filters/condition/0', '/filters/year_min'];
  res.check(
    `${did}: SCHEMA_VALIDATION_FAILED reports all 3 failures in details.errors[] and a BadRequest`,
    JSON.stringify(locations) === JSON.stringify(expected) &&
      JSON.stringify((badRequest?.fieldViolations ?? []).map((f) => f.field).sort()) ===
        JSON.stringify(expected),
    `errors=${short(validation?.details?.errors)} badRequest=${short(badRequest)}`,
  );

  // 10. An unknown skill -> the SDK's typed UnsupportedOperationError (-32004).
  error = await sendForError(client, buildRequest({ type: UNKNOWN.request }, UNKNOWN));
  res.check(
    `${did}: an unknown skill raises UnsupportedOperationError (-32004)`,
    error instanceof UnsupportedOperationError &&
      isJsonRpcError(error) &&
      error.envelopeCode === A2A_ERROR_CODE.UNSUPPORTED_OPERATION,
    describe(error),
  );
  checkAapErrorData(res, `${did}: UNSUPPORTED_SKILL`, error?.data, 'UNSUPPORTED_SKILL');
  let exchange = wire.lastPost();
  const raw = parseJson(exchange?.body ?? '');
  res.check(
    `${did}: the SDK error keeps error.data exactly as on the wire`,
    raw?.error !== undefined && JSON.stringify(error?.data) === JSON.stringify(raw.error.data),
    `raw=${short(raw?.error, 300)}`,
  );
  res.check(
    `${did}: error reply is HTTP 200`,
    exchange?.response.status === 200,
    `status=${exchange?.response.status}`,
  );

  // 11. A part whose media type is no AAP request type: the A2A ContentTypeNotSupportedError
  //     (-32005), a protocol error without an aap.error entry (docs/protocol.md §A2A protocol errors).
  error = await sendForError(client, buildRequest({ type: UNKNOWN_MEDIA.request }, UNKNOWN_MEDIA));
  const ctInfo = Array.isArray(error?.data) ? error.data[0] ?? {} : {};
  res.check(
    `${did}: a non-AAP part mediaType raises ContentTypeNotSupportedError (-32005)`,
    error instanceof ContentTypeNotSupportedError &&
      error.envelopeCode === A2A_ERROR_CODE.CONTENT_TYPE_NOT_SUPPORTED,
    describe(error),
  );
  res.check(
    `${did}: -32005 data is ErrorInfo CONTENT_TYPE_NOT_SUPPORTED / ${A2A_DOMAIN}, no aap.error`,
    ctInfo['@type'] === ERROR_INFO_TYPE &&
      ctInfo.reason === 'CONTENT_TYPE_NOT_SUPPORTED' &&
      ctInfo.domain === A2A_DOMAIN &&
      !error.data.some((d) => d && d['@type'] === AAP_ERROR_TYPE),
    `data=${short(error?.data, 300)}`,
  );

  // 12. A lead through the SDK: delivered to the dealer's CRM, answered `received`.
  //     The Python client's lead, plus the vehicle found above, from a buyer of its own (a fresh
  //     e-mail address each run): the same buyer again would be answered `duplicate`.
  const lead = {
    type: LEAD.request,
    customer: {
      first_name: 'Interop',
      last_name: 'Check',
      email: `interop-js-${randomUUID().slice(0, 8)}@example.com`,
    },
    consent: {
      granted_at: '2026-04-30T10:16:00Z',
      allowed_channels: ['email'],
      consent_text: 'I agree to be contacted by e-mail about my enquiry.',
      scope: ['lead_submission'],
    },
    message: 'Interop check lead.',
    source_agent: { name: 'a2a-js-sdk-interop' },
    idempotency_key: randomUUID(),
  };
  if (vehicle) {
    lead.vehicle_of_interest = { vin: vehicle.vin, year: vehicle.year, make: vehicle.make, model: vehicle.model };
  }
  try {
    reply = await sendOne(client, buildRequest(lead, LEAD));
    const { data } = checkReply(res, `${did}: lead.submit`, reply, LEAD);
    res.check(
      `${did}: lead.submit is answered received with a lead_id`,
      data?.status === 'received' && Boolean(data?.lead_id),
      `data=${short(data, 300)}`,
    );
  } catch (err) {
    res.check(`${did}: lead.submit SendMessage`, false, describe(err));
  }

  // 13. A lead without consent never reaches the CRM: CONTACT_CONSENT_REQUIRED (-32000).
  const { consent: _consent, idempotency_key: _key, ...noConsent } = lead;
  error = await sendForError(client, buildRequest(noConsent, LEAD));
  res.check(
    `${did}: a lead without consent raises JsonRpcTransportError with code -32000`,
    error instanceof JsonRpcTransportError && error.envelopeCode === AAP_BUSINESS_ERROR,
    describe(error),
  );
  checkAapErrorData(res, `${did}: CONTACT_CONSENT_REQUIRED`, error?.data, 'CONTACT_CONSENT_REQUIRED');

  // 14. The same SDK client without the interceptor: the extension is not activated, so the
  //     gateway refuses with -32008, which the SDK maps to ExtensionSupportRequiredError.
  const plain = await new ClientFactory({ transports, cardResolver: resolver }).createFromAgentCard(card);
  error = await sendForError(plain, buildRequest({ type: INFO.request }, INFO));
  exchange = wire.lastPost();
  res.check(
    `${did}: without the extension activated no A2A-Extensions header is sent`,
    exchange !== undefined && !exchange.headers.has(HTTP_EXTENSION_HEADER),
    `A2A-Extensions=${JSON.stringify(exchange?.headers.get(HTTP_EXTENSION_HEADER))}`,
  );
  res.check(
    `${did}: ... and the SDK raises ExtensionSupportRequiredError (-32008) naming A2A-Extensions and the URI`,
    error instanceof ExtensionSupportRequiredError &&
      error.envelopeCode === A2A_ERROR_CODE.EXTENSION_SUPPORT_REQUIRED &&
      error.message.includes(HTTP_EXTENSION_HEADER) &&
      error.message.includes(aapUri),
    describe(error),
  );
  const info = Array.isArray(error?.data) ? error.data[0] ?? {} : {};
  res.check(
    `${did}: -32008 data has ErrorInfo EXTENSION_SUPPORT_REQUIRED / ${A2A_DOMAIN} with extensionUri`,
    info['@type'] === ERROR_INFO_TYPE &&
      info.reason === 'EXTENSION_SUPPORT_REQUIRED' &&
      info.domain === A2A_DOMAIN &&
      info.metadata?.extensionUri === aapUri &&
      info.metadata?.requiredHeader === HTTP_EXTENSION_HEADER,
    `data=${short(error?.data, 300)}`,
  );
}

// --- HTTP+JSON -----------------------------------------------------------------------------

/** The same card through the SDK's HTTP+JSON transport (`POST …/message:send`). */
async function checkRest(dealer, res) {
  const did = `${dealer.id ?? '?'} (HTTP+JSON)`;
  const wire = new WireLog();
  const resolver = new DefaultAgentCardResolver({ fetchImpl: wire.fetch });
  const cardUrl = new URL(dealer.card_url);
  const card = await resolver.resolve(cardUrl.origin, cardUrl.pathname);
  const bindings = (card.supportedInterfaces ?? []).map((i) => i.protocolBinding);
  if (
    !res.check(
      `${did}: the card lists HTTP+JSON after JSONRPC`,
      bindings[0] === 'JSONRPC' && bindings[1] === 'HTTP+JSON',
      `interfaces=${short(bindings)}`,
    )
  ) {
    return;
  }
  const aapUri = aapCard(card)?.uri;
  const factory = new ClientFactory({
    transports: [
      new JsonRpcTransportFactory({ fetchImpl: wire.fetch }),
      new RestTransportFactory({ fetchImpl: wire.fetch }),
    ],
    preferredTransports: ['HTTP+JSON'],
    cardResolver: resolver,
    clientConfig: { interceptors: [new RequiredExtensionsInterceptor()] },
  });
  const client = await factory.createFromAgentCard(card);
  res.check(
    `${did}: ClientFactory (preferredTransports HTTP+JSON) chose the v1.0 REST transport`,
    client.transport.protocolName === 'HTTP+JSON' &&
      client.protocolVersion === A2A_PROTOCOL_VERSION &&
      !client.transport.constructor.name.startsWith('Legacy'),
    `got ${client.transport.constructor.name} ${client.transport.protocolName} ${client.protocolVersion}`,
  );

  try {
    const reply = await sendOne(client, buildRequest({ type: INFO.request }, INFO));
    checkReply(res, `${did}: dealer.information`, reply, INFO);
  } catch (err) {
    res.check(`${did}: dealer.information through message:send`, false, describe(err));
  }
  let sent = wire.lastPost();
  res.check(
    `${did}: POSTed to …/message:send with A2A-Version 1.0 and A2A-Extensions`,
    sent !== undefined &&
      new URL(sent.url).pathname.endsWith('/message:send') &&
      sent.headers.get(A2A_VERSION_HEADER) === '1.0' &&
      headerList(sent.headers, HTTP_EXTENSION_HEADER).includes(aapUri),
    `url=${sent?.url} headers=${short(sent ? [...sent.headers] : null)}`,
  );

  try {
    const reply = await sendOne(
      client,
      buildRequest(
        { type: SEARCH.request, filters: { condition: ['new', 'used', 'cpo'] }, pagination: { skip: 0, limit: 2 } },
        SEARCH,
      ),
    );
    const { data } = checkReply(res, `${did}: inventory.search`, reply, SEARCH);
    res.check(
      `${did}: inventory.search returns at most 2 vehicles and echoes limit 2`,
      Array.isArray(data?.vehicles) && data.vehicles.length <= 2 && data.limit === 2,
      `data=${short(data, 200)}`,
    );
  } catch (err) {
    res.check(`${did}: inventory.search through message:send`, false, describe(err));
  }

  // AAP errors over REST: non-2xx with a google.rpc.Status whose details carry the AAP entries.
  // The SDK only maps A2A reasons, so it raises a generic A2AError with the HTTP status.
  const restError = async (label, request, code, status) => {
    const error = await sendForError(client, request);
    res.check(
      `${did}: ${label} raises an SDK A2AError with statusCode ${status}`,
      error instanceof A2AError && isRestError(error) && error.statusCode === status,
      describe(error),
    );
    sent = wire.lastPost();
    const envelope = parseJson(sent?.body ?? '')?.error ?? {};
    res.check(
      `${did}: ${label} is HTTP ${status} with google.rpc.Status code ${status}`,
      sent?.response.status === status && envelope.code === status,
      `status=${sent?.response.status} body=${short(sent?.body, 300)}`,
    );
    checkAapErrorData(res, `${did}: ${code}`, envelope.details, code);
  };
  await restError(
    'an unknown skill',
    buildRequest({ type: UNKNOWN.request }, UNKNOWN),
    'UNSUPPORTED_SKILL',
    404,
  );
  await restError(
    'an unknown VIN',
    buildRequest({ type: VEHICLE.request, vin: MISSING_VIN }, VEHICLE),
    'VEHICLE_NOT_FOUND',
    404,
  );
}

// --- throttling ----------------------------------------------------------------------------

/**
 * `--throttle STATUS`: against a gateway whose quota is one call (run.sh starts it with
 * `bindings.jsonrpc.rate_limited_status` = STATUS), the second call is RATE_LIMITED. Records
 * what a buyer using this SDK sees (docs/protocol.md §Rate limits): the SDK parses a JSON-RPC
 * error body whatever the HTTP status, so the code and `error.data` survive both settings.
 */
async function checkThrottle(dealer, res, status) {
  const did = `${dealer.id ?? '?'} (rate_limited_status ${status})`;
  const wire = new WireLog();
  const resolver = new DefaultAgentCardResolver({ fetchImpl: wire.fetch });
  const cardUrl = new URL(dealer.card_url);
  const card = await resolver.resolve(cardUrl.origin, cardUrl.pathname);
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl: wire.fetch })],
    cardResolver: resolver,
    clientConfig: { interceptors: [new RequiredExtensionsInterceptor()] },
  });
  const client = await factory.createFromAgentCard(card);
  const request = () => buildRequest({ type: INFO.request }, INFO);
  res.check(`${did}: the first call is answered`, (await sendForError(client, request())) === undefined);
  const error = await sendForError(client, request());
  const sent = wire.lastPost();
  const body = parseJson(sent?.body ?? '') ?? {};
  res.check(
    `${did}: the wire reply is HTTP ${status} with Retry-After and the JSON-RPC -32000 body`,
    sent?.response.status === status &&
      Number(sent?.response.headers.get('retry-after')) >= 1 &&
      body.error?.code === AAP_BUSINESS_ERROR,
    `status=${sent?.response.status} retry-after=${sent?.response.headers.get('retry-after')} body=${short(body, 200)}`,
  );
  res.check(
    `${did}: the SDK raises JsonRpcTransportError with code -32000 and keeps error.data`,
    error instanceof JsonRpcTransportError && error.envelopeCode === AAP_BUSINESS_ERROR,
    describe(error),
  );
  checkAapErrorData(res, `${did}: RATE_LIMITED`, error?.data, 'RATE_LIMITED', true);
  console.log(`finding ${did}: a buyer sees ${describe(error)}`);
}

// --- main ----------------------------------------------------------------------------------

async function main(argv) {
  if (argv.length === 3 && argv[0] === '--throttle') {
    const endpoints = JSON.parse(await readFile(argv[2], 'utf8'));
    const res = new Results();
    const dealer = (endpoints.dealers ?? [])[0];
    if (dealer) {
      await checkThrottle(dealer, res, Number(argv[1]));
    } else {
      res.check('endpoints file lists at least one dealer', false);
    }
    console.log(`interop-js throttle: ${res.passed} passed, ${res.failed} failed`);
    return res.failed === 0 && res.passed > 0 ? 0 : 1;
  }
  if (argv.length !== 1) {
    console.error('usage: client.mjs ENDPOINTS_FILE | client.mjs --throttle STATUS ENDPOINTS_FILE');
    return 2;
  }
  const endpoints = JSON.parse(await readFile(argv[0], 'utf8'));
  const res = new Results();
  const dealers = Array.isArray(endpoints.dealers) ? endpoints.dealers : [];
  res.check('endpoints file lists at least one dealer', dealers.length > 0);
  for (const dealer of dealers) {
    try {
      await checkDealer(dealer, res);
      if (dealer.http_json_url) await checkRest(dealer, res);
    } catch (err) {
      console.error(err);
      res.check(`${dealer.id ?? '?'}: unexpected exception`, false, describe(err));
    }
  }
  console.log(`interop-js: ${res.passed} passed, ${res.failed} failed`);
  return res.failed === 0 && res.passed > 0 ? 0 : 1;
}

const watchdog = setTimeout(() => {
  console.log(`FAIL watchdog: the checks did not finish within ${WATCHDOG_MS / 1000}s`);
  process.exit(1);
}, WATCHDOG_MS);
watchdog.unref();

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error(err);
    console.log('interop-js: 0 passed, 1 failed');
    process.exitCode = 1;
  },
);
