"""Real image files for the uploads that Schemathesis makes from /openapi.json, one strategy per
media type the document names (test_serve_http.py loads this module through SCHEMATHESIS_HOOKS).
Left alone, Schemathesis draws an upload's bytes from anything, which the server rightly refuses
with 400; with these, every upload it calls valid is an image, and must get its answer."""

import io

import schemathesis
from hypothesis import strategies as st
from PIL import Image

FORMATS = {
    "image/bmp": "BMP",
    "image/gif": "GIF",
    "image/jpeg": "JPEG",
    "image/png": "PNG",
    "image/tiff": "TIFF",
    "image/webp": "WEBP",
}


@st.composite
def image_file(draw, format: str) -> bytes:
    width, height = draw(st.integers(1, 48)), draw(st.integers(1, 48))
    pixels = draw(st.binary(min_size=3 * width * height, max_size=3 * width * height))
    file = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(file, format)
    return file.getvalue()


for media_type, format in FORMATS.items():
    schemathesis.openapi.media_type(media_type, image_file(format))
