-- wrk: POST one fortune-length text per request to /v1/classify (the
-- fortunes-classify model served as "text"). bench_serve_raw classifies the
-- same text in process.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"text","input":"You will be successful in your work, but only after a long journey over ' ..
  'water and a meeting with an old friend."}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
