#!/usr/bin/env python3
"""find_image.py SCREENSHOT.png SAMPLE.json [SCALE]: exits 0 when the
screenshot shows the Fashion-MNIST sample (the JSON /v1/samples/fashion-mnist/N
answers) as the page draws it: each pixel p a SCALE x SCALE block of grey
255 - round(255 p). Reads the PNG with the standard library alone (8-bit RGB
or RGBA, non-interlaced, as Chromium writes screenshots)."""
import json
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, chunks, header = 8, [], None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        at += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    return width, height, channels, rows


def main():
    width, height, channels, rows = read_png(sys.argv[1])
    pixels = json.load(open(sys.argv[2]))["pixels"]
    scale = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    grey = [255 - round(p * 255) for p in pixels]
    darkest = min(range(784), key=lambda i: grey[i])
    di, dj = divmod(darkest, 28)
    for y in range(height):
        row = rows[y]
        for x in range(width):
            if row[x * channels] != grey[darkest] or row[x * channels + 1] != grey[darkest]:
                continue
            oy, ox = y - di * scale, x - dj * scale
            if oy < 0 or ox < 0 or oy + 28 * scale > height or ox + 28 * scale > width:
                continue
            if all(rows[oy + i * scale + scale // 2][(ox + j * scale + scale // 2) * channels] == grey[i * 28 + j]
                   for i in range(28) for j in range(28)):
                print(f"the sample is drawn at ({ox}, {oy})")
                return 0
    print("the sample is not in the screenshot")
    return 1


if __name__ == "__main__":
    sys.exit(main())
