-- wrk: POST one review-length text (KILN_SENTIMENT_TEXT) per request to
-- /v1/classify, for the DistilBERT-shaped sentiment model
-- (bench/serve/sentiment_bench.sh sets the text).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"sentiment","input":"' .. os.getenv("KILN_SENTIMENT_TEXT") .. '"}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
