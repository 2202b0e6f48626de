-- wrk: POST one Fashion-MNIST-sized image per request to KServe v2 infer with
-- the binary tensor data extension (Triton's clients' default): a JSON header,
-- then 784 little-endian FP32 pixels. serve_bench.sh writes the body to
-- $KILN_BINARY_BODY and its header's length to $KILN_BINARY_HEADER_LENGTH.
local f = assert(io.open(os.getenv("KILN_BINARY_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = os.getenv("KILN_BINARY_HEADER_LENGTH")
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
