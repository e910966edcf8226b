#!/usr/bin/env node
// Interop check: the official MCP TypeScript SDK (@modelcontextprotocol/sdk) client against
// aap-gateway's MCP binding.
//
// Usage: node client.mjs ENDPOINTS_FILE
//        node client.mjs --throttle ENDPOINTS_FILE   (a gateway allowing one call per skill)
//
// ENDPOINTS_FILE is the JSON written by `aap-gateway demo --endpoints-file F`; each dealer has an
// `mcp_url`. Only the SDK talks MCP: `Client` over `StreamableHTTPClientTransport` initializes
// (version negotiation, Mcp-Session-Id, MCP-Protocol-Version on later requests), lists and calls
// the tools, checks every `structuredContent` against the tool's `outputSchema` (Ajv), and ends
// the session with DELETE. The oracle for which tools a dealer has is its agent card.
//
// Prints one line per check and finally `mcp interop (js): N passed, M failed`; exits 1 on any
// failure.

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const HANDSHAKE_VERSIONS = new Set(['2025-11-25', '2025-06-18']);
let passed = 0;
let failed = 0;

function check(name, ok, detail = '') {
  if (ok) {
    passed += 1;
    console.log(`ok   ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`);
  }
}

const textOf = (result) => result.content.map((c) => c.text ?? '').join(' ');
const aapError = (result) => JSON.parse(result.content[1].text);

async function cardTools(dealer) {
  // The card is chosen by Host for host-routed dealers; fetch sends the URL's host, which is the
  // demo's first host name for Demo Toyota (127.0.0.1) and the path prefix for the others.
  const response = await fetch(dealer.card_url);
  const card = await response.json();
  return new Set(card.skills.map((s) => s.id.replaceAll('.', '_')));
}

function lead(dealer, key, message, consent = true) {
  const args = {
    customer: {
      first_name: 'Søren',
      last_name: "D'Arcy-Nakamura",
      email: 'soren.interop@example.net',
      phone: '+14155550177',
      preferred_contact: 'phone',
    },
    message,
    source_agent: { name: 'mcp-js-interop' },
    idempotency_key: key,
  };
  if (consent) {
    args.consent = {
      granted_at: '2026-02-11T18:05:00Z',
      allowed_channels: ['phone', 'email'],
      consent_text: `I agree that ${dealer} may call or e-mail me about this request.`,
      scope: ['lead_submission'],
    };
  }
  return args;
}

async function connect(url) {
  const client = new Client({ name: 'aap-gateway-interop', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport };
}

async function checkDealer(dealer) {
  const name = dealer.id;
  const expected = await cardTools(dealer);
  const { client, transport } = await connect(dealer.mcp_url);
  try {
    check(`${name}: a session id was issued`, typeof transport.sessionId === 'string' && transport.sessionId.length >= 16, transport.sessionId);
    check(`${name}: initialize negotiated a handshake version`, HANDSHAKE_VERSIONS.has(transport.protocolVersion), transport.protocolVersion);
    const { tools } = await client.listTools();
    const names = new Set(tools.map((t) => t.name));
    check(`${name}: tools/list = the card's skills`, names.size === expected.size && [...names].every((n) => expected.has(n)), [...names]);

    const info = await client.callTool({ name: 'dealer_information', arguments: {} });
    check(`${name}: dealer_information`, !info.isError && info.structuredContent.rooftops.length > 0, textOf(info));

    const search = await client.callTool({
      name: 'inventory_search',
      arguments: { filters: { condition: ['new'] }, sort: { field: 'price', order: 'asc' }, pagination: { limit: 4 } },
    });
    const vehicles = search.structuredContent?.vehicles ?? [];
    const prices = vehicles.map((v) => v.price).filter((p) => p !== undefined);
    check(
      `${name}: inventory_search (new, cheapest first)`,
      !search.isError && vehicles.length > 0 && vehicles.every((v) => v.condition === 'new')
        && prices.every((p, i) => i === 0 || prices[i - 1] <= p),
      textOf(search),
    );

    const facets = await client.callTool({ name: 'inventory_facets', arguments: {} });
    check(`${name}: inventory_facets`, !facets.isError && Array.isArray(facets.structuredContent.makes), textOf(facets));

    if (vehicles.length > 0) {
      const vin = vehicles[0].vin;
      const detail = await client.callTool({ name: 'inventory_vehicle', arguments: { vin } });
      check(`${name}: inventory_vehicle by VIN`, !detail.isError && detail.structuredContent.vin === vin, textOf(detail));
    }
    const missing = await client.callTool({ name: 'inventory_vehicle', arguments: { vin: '1HGCM82633A004352' } });
    check(
      `${name}: an unknown VIN is VEHICLE_NOT_FOUND`,
      missing.isError && aapError(missing).code === 'VEHICLE_NOT_FOUND',
      textOf(missing),
    );

    const invalid = await client.callTool({ name: 'inventory_search', arguments: { sort: { field: 'colour' } } });
    const fields = invalid.isError ? aapError(invalid).details.errors.map((e) => e.instanceLocation).sort() : [];
    check(
      `${name}: a bad argument is a tool error with its field list`,
      invalid.isError && fields.includes('/sort/field') && fields.includes('/sort/order'),
      textOf(invalid),
    );

    const key = `js-${randomUUID()}`;
    const first = await client.callTool({ name: 'lead_submit', arguments: lead(name, key, 'Can I test drive it on Saturday?') });
    const replay = await client.callTool({ name: 'lead_submit', arguments: lead(name, key, 'Can I test drive it on Saturday?') });
    const leadId = first.structuredContent?.lead_id;
    check(`${name}: lead_submit received`, !first.isError && first.structuredContent.status === 'received' && leadId, textOf(first));
    check(`${name}: the lead replayed with its key gives the same lead`, !replay.isError && replay.structuredContent.lead_id === leadId, textOf(replay));

    let unknown = null;
    try {
      await client.callTool({ name: 'trade_in_appraisal', arguments: {} });
    } catch (e) {
      unknown = e;
    }
    check(`${name}: an unknown tool is a JSON-RPC error (-32602)`, unknown?.code === -32602, String(unknown));
  } finally {
    await transport.terminateSession();
    await client.close();
  }
}

async function checkThrottle(dealer) {
  const name = dealer.id;
  const { client, transport } = await connect(dealer.mcp_url);
  try {
    const first = await client.callTool({ name: 'dealer_information', arguments: {} });
    check(`${name}: first call within the quota`, !first.isError, textOf(first));
    const second = await client.callTool({ name: 'dealer_information', arguments: {} });
    const error = second.isError ? aapError(second) : {};
    check(
      `${name}: second call is RATE_LIMITED with a retry hint`,
      second.isError && error.code === 'RATE_LIMITED' && error.retryable === true && error.details.retry_after_ms > 0,
      textOf(second),
    );
  } finally {
    await transport.terminateSession();
    await client.close();
  }
}

async function main() {
  let args = process.argv.slice(2);
  const throttle = args[0] === '--throttle';
  if (throttle) args = args.slice(1);
  if (args.length !== 1) {
    console.error('usage: client.mjs [--throttle] ENDPOINTS_FILE');
    return 2;
  }
  const endpoints = JSON.parse(readFileSync(args[0], 'utf8'));
  for (const dealer of endpoints.dealers) {
    if (!dealer.mcp_url) {
      check(`${dealer.id}: mcp_url in the endpoints file`, false, dealer);
      continue;
    }
    try {
      await (throttle ? checkThrottle : checkDealer)(dealer);
    } catch (e) {
      console.error(e);
      check(`${dealer.id}: no exception`, false, String(e));
    }
  }
  console.log(`mcp interop (js): ${passed} passed, ${failed} failed`);
  return failed ? 1 : 0;
}

process.exitCode = await main();
