-- wrk script for bench/: prints one machine-readable line (BENCH_JSON {...}) when wrk is done.
-- With BENCH_MAX_REQUESTS=N and BENCH_MARKER=FILE, the thread stops issuing requests after N and
-- creates FILE; the harness then sends wrk SIGINT, which ends the run early (wrk itself only
-- knows durations). Without them, request() is not defined and wrk sends its static request.
local cap = tonumber(os.getenv("BENCH_MAX_REQUESTS") or "0") or 0
local marker = os.getenv("BENCH_MARKER") or ""

if cap > 0 and marker ~= "" then
  -- wrk calls request() once before the run to check the script (script_verify_request), hence
  -- "cap + 2": the first call sends nothing, the next cap calls are sent, the one after stops.
  local issued = 0
  function request()
    issued = issued + 1
    if issued == cap + 2 then
      local f = io.open(marker, "w")
      if f then f:close() end
      wrk.thread:stop()
    end
    return wrk.format()
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %.1f, "errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
