-- wrk script for bench/load.sh: one request shape per run, a correctness check on every reply,
-- and a machine-readable summary line from done().
--
-- Arguments (after `--` on the wrk command line):
--   1  label            e.g. "direct" or "gateway" (echoed in the summary line)
--   2  body file        path of the request body, or "-" for none (GET)
--   3  expected text    a reply counts as good only if its status is 200 and its body contains
--                       this text (plain substring); "-" checks the status only
--   4… headers          "Name: value", one argument each
--
-- The summary line, printed once by done():
--   BENCH label=… requests=… duration_s=… rps=… mean_us=… p50_us=… p90_us=… p99_us=… max_us=…
--         socket_errors=… http_errors=… timeouts=… bad=…
-- `bad` counts replies that failed the check (e.g. a JSON-RPC error, which is HTTP 200).

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

local expect = nil

function init(args)
   label = args[1] or "run"
   local body_file = args[2] or "-"
   expect = args[3]
   if expect == "-" then expect = nil end
   if body_file ~= "-" then
      local f = assert(io.open(body_file, "rb"))
      wrk.body = f:read("*a")
      f:close()
      wrk.method = "POST"
   else
      wrk.method = "GET"
   end
   for i = 4, #args do
      local name, value = args[i]:match("^([^:]+):%s*(.*)$")
      if name then wrk.headers[name] = value end
   end
   bad = 0
   -- No call to wrk.init here: wrk.init calls this function, then builds the request from
   -- wrk.method/body/headers.
end

function response(status, headers, body)
   if status ~= 200 or (expect and not (body and body:find(expect, 1, true))) then
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   local bad_total = 0
   local label_seen = "run"
   for _, t in ipairs(threads) do
      bad_total = bad_total + (t:get("bad") or 0)
      label_seen = t:get("label") or label_seen
   end
   local e = summary.errors
   local secs = summary.duration / 1e6
   io.write(string.format(
      "BENCH label=%s requests=%d duration_s=%.3f rps=%.1f mean_us=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d socket_errors=%d http_errors=%d timeouts=%d bad=%d\n",
      label_seen, summary.requests, secs, summary.requests / secs, latency.mean,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      e.connect + e.read + e.write, e.status, e.timeout, bad_total))
end
