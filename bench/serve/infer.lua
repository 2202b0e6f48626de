-- wrk: POST one Fashion-MNIST-sized image (FP32 [1,1,28,28]) per request to KServe v2 infer.
local pixels = {}
for i = 1, 784 do pixels[i] = string.format("%.3f", ((i * 37) % 256) / 255) end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"images","shape":[1,1,28,28],"datatype":"FP32","data":[' ..
  table.concat(pixels, ",") .. ']}]}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
