"""Image references from requests: data: URLs, guarded http(s) fetches, and their refusals.

Pictures are made here with Pillow; fetches go to a real local server (a thread on
127.0.0.1) through an injected resolver, so nothing leaves the machine.
"""

from __future__ import annotations

import base64
import io
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image as PILImage

from tensorfold.vision import source
from tensorfold.vision.source import Image, ImageLimits, ImageRefused, is_public_address, load_image

# --- pictures ---


def picture(mode: str = "RGB", size: tuple[int, int] = (4, 3), color: object = (255, 0, 0)) -> PILImage.Image:
    return PILImage.new(mode, size, color)


def gradient(size: tuple[int, int] = (8, 6)) -> PILImage.Image:
    im = PILImage.new("RGB", size)
    im.putdata([(x * 30, y * 40, (x * y) % 256) for y in range(size[1]) for x in range(size[0])])
    return im


def encode(im: PILImage.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels, with (almost) no pixel data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


RED_PNG = encode(picture(), "PNG")


def close(actual: tuple[int, ...], expected: tuple[int, ...], tol: int = 8) -> bool:
    return all(abs(a - e) <= tol for a, e in zip(actual, expected, strict=True))


# --- data: URLs ---


@pytest.mark.parametrize(("fmt", "mime", "params"), [
    ("PNG", "image/png", {}),
    ("JPEG", "image/jpeg", {"quality": 95}),
    ("JPEG", "image/jpg", {"quality": 95}),
    ("WEBP", "image/webp", {"lossless": True}),
])
def test_data_url_decodes_to_rgb(fmt, mime, params):
    image = load_image(data_url(encode(picture(), fmt, **params), mime))
    assert isinstance(image, Image)
    assert image.source == "data"
    assert image.rgb.mode == "RGB" and image.rgb.size == (4, 3)
    assert close(image.rgb.getpixel((1, 1)), (255, 0, 0))
    assert len(image.digest) == 64


def test_rgba_is_flattened_onto_white():
    im = PILImage.new("RGBA", (3, 1))
    im.putdata([(0, 0, 0, 0), (255, 0, 0, 128), (0, 0, 255, 255)])
    rgb = load_image(data_url(encode(im, "PNG"))).rgb
    assert rgb.mode == "RGB"
    assert rgb.getpixel((0, 0)) == (255, 255, 255)
    assert close(rgb.getpixel((1, 0)), (255, 127, 127), tol=2)
    assert rgb.getpixel((2, 0)) == (0, 0, 255)


def test_gif_gives_its_first_frame():
    red, blue = picture(size=(4, 4)), picture(size=(4, 4), color=(0, 0, 255))
    gif = encode(red, "GIF", save_all=True, append_images=[blue], duration=100, loop=0)
    assert PILImage.open(io.BytesIO(gif)).n_frames == 2
    rgb = load_image(data_url(gif, "image/gif")).rgb
    assert rgb.mode == "RGB" and rgb.getpixel((2, 2)) == (255, 0, 0)


def test_palette_image_and_its_transparency():
    im = PILImage.new("P", (2, 1))
    im.putpalette([0, 128, 0, 10, 20, 30] + [0] * 762)
    im.putdata([0, 1])
    rgb = load_image(data_url(encode(im, "PNG"))).rgb
    assert [rgb.getpixel((0, 0)), rgb.getpixel((1, 0))] == [(0, 128, 0), (10, 20, 30)]
    see_through = load_image(data_url(encode(im, "PNG", transparency=1))).rgb
    assert [see_through.getpixel((0, 0)), see_through.getpixel((1, 0))] == [(0, 128, 0), (255, 255, 255)]


def test_grey_and_sixteen_bit_grey():
    assert load_image(data_url(encode(picture("L", color=90), "PNG"))).rgb.getpixel((0, 0)) == (90, 90, 90)
    deep = load_image(data_url(encode(PILImage.new("I;16", (2, 2), 40000), "PNG"))).rgb
    assert deep.getpixel((0, 0)) == (156, 156, 156)


def test_same_picture_same_digest_whatever_the_container():
    im = gradient()
    png = load_image(data_url(encode(im, "PNG")))
    webp = load_image(data_url(encode(im, "WEBP", lossless=True), "image/webp"))
    assert png.digest == webp.digest
    assert png.digest != load_image(data_url(encode(gradient((6, 8)), "PNG"))).digest
    # the same bytes in another shape are another picture
    flat = PILImage.frombytes("RGB", (6, 8), im.tobytes())
    assert load_image(data_url(encode(flat, "PNG"))).digest != png.digest


def test_base64_may_carry_line_breaks():
    payload = base64.encodebytes(RED_PNG).decode()
    assert "\n" in payload
    assert load_image(f"data:image/png;base64,{payload}").rgb.size == (4, 3)


@pytest.mark.parametrize(("url", "words"), [
    ("data:text/plain;base64,aGVsbG8=", "data URL type text/plain is not an image"),
    ("data:image/svg+xml;base64,PHN2Zy8+", "data URL type image/svg+xml is not an image"),
    ("data:image/bmp;base64,Qk0=", "data URL type image/bmp is not an image"),
    ("data:;base64,aGVsbG8=", "data URL type (none) is not an image"),
    ("data:image/png," + base64.b64encode(RED_PNG).decode(), "not a valid base64 data URL"),
    ("data:image/png;base64", "not a valid base64 data URL"),
    ("data:image/png;base64,iVBORw0KGgo*!", "not a valid base64 data URL"),
    ("data:image/png;base64,iVBORw0KGgo=é", "not a valid base64 data URL"),
])
def test_data_url_refusals(url, words):
    with pytest.raises(ImageRefused, match="^image_url: ") as caught:
        load_image(url)
    assert words in str(caught.value)


@pytest.mark.parametrize("url", ["ftp://example.com/x.png", "file:///etc/passwd", "javascript:alert(1)",
                                 "", "images/x.png", "//example.com/x.png", 42])
def test_only_data_and_http_urls(url):
    with pytest.raises(ImageRefused, match="only data: and http\\(s\\): URLs are accepted"):
        load_image(url)


def test_payload_over_max_bytes_is_refused_before_decoding():
    # not even valid base64: the size rule must answer first
    with pytest.raises(ImageRefused, match=r"the image is 1\.5 KB; the limit is 1,000 bytes \(--limit image_bytes=N\)"):
        load_image("data:image/png;base64," + "!" * 2000, ImageLimits(max_bytes=1000))
    with pytest.raises(ImageRefused, match=r"the image is 25\.3 MB; the limit is 20 MB \(--limit image_bytes=N\)"):
        load_image("data:image/png;base64," + "A" * int(25.3 * 2**20 * 4 / 3))


@pytest.mark.parametrize(("data", "mime"), [
    (b"hello, not an image", "image/png"),
    (encode(picture(), "BMP"), "image/png"),  # a real format other than the four
    (encode(picture(), "TIFF"), "image/jpeg"),
    (RED_PNG[: len(RED_PNG) // 2], "image/png"),  # truncated
    (b"", "image/png"),
])
def test_bytes_that_are_not_an_accepted_image(data, mime):
    with pytest.raises(ImageRefused, match="the bytes are not a png, jpeg, webp or gif image"):
        load_image(data_url(data, mime))


def test_declared_type_may_differ_from_the_real_one():
    assert load_image(data_url(RED_PNG, "image/jpeg")).rgb.size == (4, 3)


def test_pixel_limit():
    with pytest.raises(ImageRefused, match=r"20x20 = 400 pixels; the limit is 399 \(--limit image_pixels=N\)"):
        load_image(data_url(encode(picture(size=(20, 20)), "PNG")), ImageLimits(max_pixels=399))
    assert load_image(data_url(encode(picture(size=(20, 20)), "PNG")), ImageLimits(max_pixels=400))


def test_pixel_bombs_are_refused_from_the_header():
    before = PILImage.MAX_IMAGE_PIXELS
    start = time.monotonic()
    with pytest.raises(ImageRefused, match=r"8000x8000 = 64,000,000 pixels; the limit is 50,000,000 \(--limit image_pixels=N\)"):
        load_image(data_url(png_header(8000, 8000)))
    with pytest.raises(ImageRefused, match=r"the limit is 50,000,000 \(--limit image_pixels=N\)"):
        load_image(data_url(png_header(100_000, 100_000)))
    assert time.monotonic() - start < 1.0
    assert PILImage.MAX_IMAGE_PIXELS == before


# --- addresses ---


@pytest.mark.parametrize(("ip", "public"), [
    ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
    ("240.0.0.1", False), ("255.255.255.255", False), ("::1", False), ("::", False), ("fe80::1", False),
    ("fc00::1", False), ("fd12:3456::1", False), ("fec0::1", False), ("2001:db8::1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False), ("2002:7f00:1::", False),
    ("ff02::1", False), ("8.8.8.8", True), ("1.1.1.1", True), ("::ffff:8.8.8.8", True),
    ("2606:4700:4700::1111", True), ("not-an-ip", False), ("", False), ("8.8.8.8.8", False),
])
def test_is_public_address(ip, public):
    assert is_public_address(ip) is public


# --- a local server ---


class Handler(BaseHTTPRequestHandler):
    """Routes by path; records every request's path and Host header on the server."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Host")))
        route = self.path.split("?")[0].strip("/").replace("-", "_").replace(".", "_")
        getattr(self, f"route_{route}", self.route_missing)()

    def answer(self, status: int, ctype: str | None, body: bytes = b"", length: bool = True,
               **headers: str) -> None:
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str, status: int = 302) -> None:
        self.answer(status, None, Location=location)

    def route_x_png(self) -> None:
        self.answer(200, "image/png", RED_PNG)

    def route_typed(self) -> None:
        self.answer(200, "Image/PNG; name=x.png", RED_PNG)

    def route_r1(self) -> None:
        self.redirect("/r2")

    def route_r2(self) -> None:
        self.redirect("r3", 301)

    def route_r3(self) -> None:
        self.redirect(f"http://images.test:{self.server.server_port}/x.png", 307)

    def route_elsewhere(self) -> None:
        self.redirect(f"http://evil.test:{self.server.server_port}/x.png")

    def route_to_file(self) -> None:
        self.redirect("file:///etc/passwd", 308)

    def route_loop(self) -> None:
        self.redirect("/loop", 303)

    def route_page(self) -> None:
        self.answer(200, "text/html; charset=utf-8", b"<html>hi</html>")

    def route_untyped(self) -> None:
        self.answer(200, None, RED_PNG)

    def route_missing(self) -> None:
        self.answer(404, "text/plain", b"no")

    def route_big(self) -> None:
        self.answer(200, "image/png", b"x" * 5000)

    def route_endless(self) -> None:
        self.answer(200, "image/png", length=False)  # HTTP/1.0: the body ends when the connection does
        try:
            for _ in range(1024):
                self.wfile.write(b"x" * 65536)
        except OSError:
            pass

    def route_slow(self) -> None:
        time.sleep(1.0)
        try:
            self.route_x_png()
        except OSError:  # the client gave up long ago
            pass

    def route_drip(self) -> None:
        self.answer(200, "image/png", length=False, **{"Content-Length": "100"})
        try:
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass


def serve(tls: ssl.SSLContext | None = None) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.seen = []
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    yield from serve()


def hosts(port: int | None = None, **names: str):
    """A resolver from a table (images.test -> 127.0.0.1 by default) that logs its calls."""
    table = {"images.test": "127.0.0.1", **names}
    calls: list[tuple[str, int]] = []

    def resolve(host: str, port_: int) -> list[str]:
        calls.append((host, port_))
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [table[host]]

    resolve.calls = calls
    return resolve


def anywhere(ip: str) -> bool:
    return True


def fetch(url: str, limits: ImageLimits = ImageLimits(), resolve=None, allow=anywhere) -> Image:
    return load_image(url, limits, resolve=resolve or hosts(), allow_address=allow)


# --- fetching ---


def test_fetches_a_png_from_the_pinned_address_with_the_original_host(server):
    port = server.server_port
    resolve = hosts()
    image = fetch(f"http://images.test:{port}/x.png?size=small#frag", resolve=resolve)
    assert image.rgb.getpixel((0, 0)) == (255, 0, 0)
    assert image.source == f"http://images.test:{port}/x.png?size=small#frag"
    assert image.digest == load_image(data_url(RED_PNG)).digest
    assert server.seen == [("/x.png?size=small", f"images.test:{port}")]
    assert resolve.calls == [("images.test", port)]


def test_content_type_parameters_and_case_are_ignored(server):
    assert fetch(f"http://images.test:{server.server_port}/typed").rgb.size == (4, 3)


def test_redirect_chain_ends_at_the_png(server):
    port = server.server_port
    resolve = hosts()
    image = fetch(f"http://images.test:{port}/r1", resolve=resolve)
    assert image.rgb.getpixel((0, 0)) == (255, 0, 0)
    assert image.source == f"http://images.test:{port}/x.png"
    assert [path for path, _ in server.seen] == ["/r1", "/r2", "/r3", "/x.png"]
    assert len(resolve.calls) == 4  # every hop resolved and checked again


def test_redirect_to_a_refused_address_is_stopped_on_that_hop(server):
    port = server.server_port
    resolve = hosts(**{"evil.test": "127.0.0.2"})
    with pytest.raises(ImageRefused, match="evil.test resolves to a private or reserved address; "
                                           "the server only fetches public addresses"):
        fetch(f"http://images.test:{port}/elsewhere", resolve=resolve, allow=lambda ip: ip == "127.0.0.1")
    assert [path for path, _ in server.seen] == ["/elsewhere"]
    assert resolve.calls == [("images.test", port), ("evil.test", port)]


def test_redirect_to_another_scheme_is_refused(server):
    with pytest.raises(ImageRefused, match="only data: and http\\(s\\): URLs are accepted"):
        fetch(f"http://images.test:{server.server_port}/to-file")


def test_too_many_redirects(server):
    with pytest.raises(ImageRefused, match="more than 2 redirects"):
        fetch(f"http://images.test:{server.server_port}/loop", ImageLimits(max_redirects=2))
    assert len(server.seen) == 3
    with pytest.raises(ImageRefused, match="more than 5 redirects"):
        fetch(f"http://images.test:{server.server_port}/loop")


@pytest.mark.parametrize(("path", "words"), [
    ("/page", "content type text/html is not an image (png, jpeg, webp or gif)"),
    ("/untyped", "content type (none) is not an image"),
    ("/missing", "the server answered 404"),
])
def test_answers_that_are_not_an_image(server, path, words):
    with pytest.raises(ImageRefused) as caught:
        fetch(f"http://images.test:{server.server_port}{path}")
    assert words in str(caught.value)


def test_body_over_max_bytes_with_content_length_is_refused_up_front(server):
    with pytest.raises(ImageRefused, match=r"the image is 4\.9 KB; the limit is 1,000 bytes \(--limit image_bytes=N\)"):
        fetch(f"http://images.test:{server.server_port}/big", ImageLimits(max_bytes=1000))


def test_body_over_max_bytes_without_content_length_stops_the_download(server):
    start = time.monotonic()
    with pytest.raises(ImageRefused, match=r"over the limit of 1,000 bytes \(--limit image_bytes=N\)"):
        fetch(f"http://images.test:{server.server_port}/endless", ImageLimits(max_bytes=1000))
    assert time.monotonic() - start < 2.0  # not 64 MB later


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_the_whole_fetch_has_a_deadline(server, path):
    start = time.monotonic()
    with pytest.raises(ImageRefused, match=r"could not fetch the image within 0\.3 s"):
        fetch(f"http://images.test:{server.server_port}{path}", ImageLimits(fetch_timeout=0.3))
    assert time.monotonic() - start < 0.9


def test_network_failures_are_refusals():
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]  # nothing listens there
    with pytest.raises(ImageRefused, match="could not fetch the image: "):
        fetch(f"http://images.test:{port}/x.png")
    with pytest.raises(ImageRefused, match="could not fetch the image: nowhere.test does not resolve"):
        fetch("http://nowhere.test/x.png")
    with pytest.raises(ImageRefused, match="could not fetch the image: nowhere.test does not resolve"):
        fetch("http://nowhere.test/x.png", resolve=lambda host, port: [])
    with pytest.raises(ImageRefused, match="could not fetch the image: "):
        fetch("http://images.test:99999/x.png")
    with pytest.raises(ImageRefused, match="the URL has no host"):
        fetch("http:///x.png")


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}/x.png", "http://[::1]:{port}/x.png",
                                 "http://images.test:{port}/x.png", "http://mixed.test:{port}/x.png",
                                 "https://images.test:{port}/x.png"])
def test_default_policy_refuses_local_addresses_before_connecting(server, url):
    def resolve(host: str, port: int) -> list[str]:
        return {"images.test": ["10.0.0.5"], "mixed.test": ["8.8.8.8", "127.0.0.1"]}[host]

    with pytest.raises(ImageRefused, match="resolves to a private or reserved address"):
        load_image(url.format(port=server.server_port), resolve=resolve)
    assert server.seen == []


def test_default_resolver_is_checked_too(server):
    with pytest.raises(ImageRefused, match="localhost resolves to a private or reserved address"):
        load_image(f"http://localhost:{server.server_port}/x.png")
    assert server.seen == []


# --- https ---


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for images.test (and only that name)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=images.test",
                    "-addext", "subjectAltName=DNS:images.test"], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_server(certificate) -> Iterator[ThreadingHTTPServer]:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    for server in serve(context):
        server.sni = names
        yield server


@pytest.fixture
def trust(certificate, monkeypatch):
    """The module's default SSL context, trusting the test certificate as well."""
    default = ssl.create_default_context
    monkeypatch.setattr(source.ssl, "create_default_context", lambda: default(cafile=str(certificate[0])))


def test_https_pins_the_address_and_checks_the_name(tls_server, trust):
    port = tls_server.server_port
    image = fetch(f"https://images.test:{port}/x.png")
    assert image.rgb.getpixel((0, 0)) == (255, 0, 0)
    assert tls_server.sni == ["images.test"]
    assert tls_server.seen == [("/x.png", f"images.test:{port}")]


def test_https_refuses_a_certificate_for_another_name(tls_server, trust):
    with pytest.raises(ImageRefused, match="could not fetch the image: .*(certificate|hostname)"):
        fetch(f"https://other.test:{tls_server.server_port}/x.png", resolve=hosts(**{"other.test": "127.0.0.1"}))
    assert tls_server.seen == []


def test_https_verifies_certificates_by_default(tls_server):
    with pytest.raises(ImageRefused, match="could not fetch the image: .*CERTIFICATE_VERIFY_FAILED"):
        fetch(f"https://images.test:{tls_server.server_port}/x.png")
    assert tls_server.seen == []
