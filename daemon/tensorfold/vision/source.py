"""An image reference from an OpenAI request (a chat ``image_url.url`` or a Responses
``input_image.image_url``: a base64 ``data:`` URL or an http(s) URL) as a decoded RGB picture.

Bounded in encoded bytes, pixels (from the header, before decoding), fetch time and
redirects. Against request forgery, each hop's host name is resolved once, every address
must pass ``allow_address``, and the socket goes to a checked address while the name
drives the Host header, SNI and the certificate check. Synchronous (the server calls
``load_image`` through ``asyncio.to_thread``); every refusal is an ``ImageRefused``
whose message is meant for the client (a 400).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import PIL.Image

Resolver = Callable[[str, int], list[str]]
AddressCheck = Callable[[str], bool]

_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif"})
_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
_ACCEPTED = frozenset({*_FORMATS, "MPO"})  # MPO: a JPEG with extra pictures, as phone cameras write
_KINDS = "png, jpeg, webp or gif"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_HEADERS = {"User-Agent": "tensorfold", "Accept": "image/png, image/jpeg, image/webp, image/gif"}


class ImageRefused(ValueError):
    """A request's image the server will not take: the message (sent as a 400 to the client)
    says which rule or limit, and its value."""


@dataclass(frozen=True)
class ImageLimits:
    """Bounds on one image: encoded bytes, decoded pixels, fetch time and redirects."""

    max_bytes: int = 20 * 2**20  # encoded bytes per image (data URL payload or fetched body)
    max_pixels: int = 50_000_000  # decoded width*height before any resizing (decompression-bomb guard)
    fetch_timeout: float = 10.0  # seconds for a whole http(s) fetch, redirects included
    max_redirects: int = 5


@dataclass(frozen=True)
class Image:
    """A decoded picture, a digest of its pixels (for caching), and where it came from."""

    rgb: PIL.Image.Image  # mode RGB, the first frame of an animated image
    digest: str  # sha256 of width, height and the RGB bytes: the same picture in any container, the same digest
    source: str  # "data", or the final URL fetched


def load_image(url: str, limits: ImageLimits = ImageLimits(), *, resolve: Resolver | None = None,
               allow_address: AddressCheck | None = None) -> Image:
    """Decode a data: URL or fetch an http(s) one; raise ImageRefused for anything outside the rules."""
    scheme = url.strip().partition(":")[0].lower() if isinstance(url, str) and ":" in url else ""
    if scheme == "data":
        data, source = _data_bytes(url.strip(), limits), "data"
    elif scheme in ("http", "https"):
        data, source = _fetch(url.strip(), limits, resolve or _getaddrinfo, allow_address or is_public_address)
    else:
        raise ImageRefused("image_url: only data: and http(s): URLs are accepted")
    rgb = _decode(data, limits)
    return Image(rgb, _digest(rgb), source)


def is_public_address(ip: str) -> bool:
    """Whether the server may connect to ip: a globally routable unicast address, nothing local or reserved."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return _public(addr.ipv4_mapped)
        if addr.sixtofour is not None and not _public(addr.sixtofour):
            return False
    return _public(addr)


def _public(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    local = (addr.is_loopback or addr.is_private or addr.is_link_local or addr.is_multicast
             or addr.is_reserved or addr.is_unspecified or getattr(addr, "is_site_local", False))
    return addr.is_global and not local and addr not in _SHARED


# --- data: URLs and decoding ---

def _data_bytes(url: str, limits: ImageLimits) -> bytes:
    """The bytes of ``data:<image mime>;base64,<payload>``, size-checked before decoding."""
    header, comma, payload = url[len("data:"):].partition(",")
    params = [p.strip().lower() for p in header.split(";")]
    if params[0] not in _MIME_TYPES:
        raise ImageRefused(f"image_url: data URL type {params[0] or '(none)'} is not an image ({_KINDS})")
    if not comma or len(params) < 2 or params[-1] != "base64":
        raise ImageRefused("image_url: not a valid base64 data URL")
    if len(payload) * 3 // 4 > limits.max_bytes:
        raise _too_big(len(payload) * 3 // 4, limits)
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except ValueError as exc:  # binascii.Error, or a non-ASCII character
        raise ImageRefused("image_url: not a valid base64 data URL") from exc


def _decode(data: bytes, limits: ImageLimits) -> PIL.Image.Image:
    """The first frame as RGB, after checking the real format and the header's pixel count."""
    try:
        with PIL.Image.open(io.BytesIO(data), formats=_FORMATS) as im:
            if im.format not in _ACCEPTED:
                raise _not_an_image()
            if im.width * im.height > limits.max_pixels:
                raise ImageRefused(f"image_url: the image is {im.width}x{im.height} = {im.width * im.height:,} "
                                   f"pixels; the limit is {limits.max_pixels:,} (--limit image_pixels=N)")
            return _flatten(im)
    except ImageRefused:
        raise
    except PIL.Image.DecompressionBombError as exc:  # past Pillow's own (global) ceiling, at open
        raise ImageRefused(f"image_url: the image has too many pixels to decode; the limit is "
                           f"{limits.max_pixels:,} (--limit image_pixels=N)") from exc
    except Exception as exc:  # Pillow's decoders raise many types on corrupt or truncated bytes
        raise _not_an_image() from exc


def _flatten(im: PIL.Image.Image) -> PIL.Image.Image:
    """RGB pixels: transparent ones over white, 16-bit grey scaled down to 8 bits."""
    if im.mode in ("I", "I;16", "I;16B", "I;16L") and "transparency" not in im.info:
        return im.convert("I").point(lambda v: v / 256).convert("RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        white = PIL.Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return PIL.Image.alpha_composite(white, rgba).convert("RGB")
    return im.convert("RGB")


def _digest(rgb: PIL.Image.Image) -> str:
    """sha256 over the size and the RGB bytes: one picture, one digest, whatever container carried it."""
    h = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def _too_big(size: int, limits: ImageLimits) -> ImageRefused:
    got, cap = _size(size), _size(limits.max_bytes)
    if got == cap:
        got, cap = f"{size:,} bytes", f"{limits.max_bytes:,} bytes"
    return ImageRefused(f"image_url: the image is {got}; the limit is {cap} (--limit image_bytes=N)")


def _size(n: int) -> str:
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n:,} bytes"


def _not_an_image() -> ImageRefused:
    return ImageRefused(f"image_url: the bytes are not a {_KINDS} image")


# --- http(s) fetching ---

class _Clock:
    """One fetch's deadline; when it passes, a timer shuts the socket in use, so no read outlives it."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.end, self.sock = seconds, time.monotonic() + seconds, None
        self.timer = threading.Timer(seconds, lambda: _shut(self.sock))
        self.timer.daemon = True
        self.timer.start()

    def watch(self, sock: socket.socket) -> None:
        self.sock = sock
        if self.over():  # the timer may have fired just before
            _shut(sock)

    def left(self) -> float:
        """Seconds left; ImageRefused once there are none."""
        if self.over():
            raise self.refusal()
        return self.end - time.monotonic()

    def over(self) -> bool:
        return time.monotonic() >= self.end

    def refusal(self) -> ImageRefused:
        return ImageRefused(f"image_url: could not fetch the image within {self.seconds:g} s")


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also under TLS
        except OSError:
            pass


def _open(ips: list[str], port: int, clock: _Clock) -> socket.socket:
    """A TCP connection to the first of the checked addresses that answers."""
    error: OSError = OSError("no address")
    for ip in ips:
        try:
            sock = socket.create_connection((ip, port), timeout=clock.left())
        except OSError as exc:
            error = exc
            continue
        clock.watch(sock)
        return sock
    raise error


class _PinnedHTTP(http.client.HTTPConnection):
    """HTTP to addresses checked in advance, whatever the host name resolves to by now."""

    def __init__(self, host: str, port: int, ips: list[str], clock: _Clock, **kwargs: Any) -> None:
        super().__init__(host, port, timeout=clock.left(), **kwargs)
        self._ips, self._clock = ips, clock

    def connect(self) -> None:
        self.sock = _open(self._ips, self.port, self._clock)


class _PinnedHTTPS(_PinnedHTTP, http.client.HTTPSConnection):
    """HTTPS to addresses checked in advance; SNI and the certificate check use the host name."""

    def connect(self) -> None:
        super().connect()
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)
        self._clock.watch(self.sock)


def _fetch(url: str, limits: ImageLimits, resolve: Resolver, allow: AddressCheck) -> tuple[bytes, str]:
    """The image bytes and the final URL, following at most max_redirects redirects within fetch_timeout."""
    clock = _Clock(limits.fetch_timeout)
    try:
        for _hop in range(limits.max_redirects + 1):
            location, body = _get(url, limits, resolve, allow, clock)
            if location is None:
                return body, url
            url = urljoin(url, location)
        raise ImageRefused(f"image_url: more than {limits.max_redirects} redirects")
    except ImageRefused:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
    finally:
        clock.timer.cancel()
    # raised here, not in the except block: no chain keeps the failed hop's socket alive
    raise clock.refusal() if clock.over() else ImageRefused(f"image_url: could not fetch the image: {reason}")


def _get(url: str, limits: ImageLimits, resolve: Resolver, allow: AddressCheck,
         clock: _Clock) -> tuple[str | None, bytes]:
    """One hop: GET url from a checked address; a redirect's Location, or the image's bytes."""
    parts = urlsplit(url)
    https = parts.scheme.lower() == "https"
    if parts.scheme.lower() not in ("http", "https"):
        raise ImageRefused("image_url: only data: and http(s): URLs are accepted")
    host = parts.hostname
    if not host:
        raise ImageRefused("image_url: the URL has no host")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")  # a UnicodeError is a ValueError: "could not fetch"
    port = parts.port or (443 if https else 80)
    ips = _checked_addresses(host, port, resolve, allow, clock)
    if https:
        conn = _PinnedHTTPS(host, port, ips, clock, context=ssl.create_default_context())
    else:
        conn = _PinnedHTTP(host, port, ips, clock)
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=_HEADERS)
        with conn.getresponse() as resp:  # a closing response owns the socket: close it too
            if resp.status in _REDIRECTS and resp.getheader("Location"):
                return resp.getheader("Location"), b""
            _check_response(resp, limits)
            return None, _read_capped(resp, limits, clock)
    finally:
        conn.close()


def _checked_addresses(host: str, port: int, resolve: Resolver, allow: AddressCheck, clock: _Clock) -> list[str]:
    """The host's addresses (an IP literal is its own), refused unless every one passes allow."""
    ips = [host] if _is_ip(host) else _resolve_in_time(resolve, host, port, clock)
    if not all(allow(ip) for ip in ips):
        raise ImageRefused(f"image_url: {host} resolves to a private or reserved address; "
                           "the server only fetches public addresses")
    return ips


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve_in_time(resolve: Resolver, host: str, port: int, clock: _Clock) -> list[str]:
    """Resolve on a side thread, so a stuck DNS lookup counts against the fetch's deadline."""
    answer: list[list[str] | Exception] = []

    def run() -> None:
        try:
            answer.append([str(ip) for ip in resolve(host, port)])
        except Exception as exc:  # the resolver's failure is the client's answer, whatever its type
            answer.append(exc)

    thread = threading.Thread(target=run, name="image-resolve", daemon=True)
    thread.start()
    thread.join(clock.left())
    if not answer:
        raise clock.refusal()
    if isinstance(answer[0], Exception) or not answer[0]:
        reason = answer[0] or "no address"
        raise ImageRefused(f"image_url: could not fetch the image: {host} does not resolve ({reason})")
    return answer[0]


def _getaddrinfo(host: str, port: int) -> list[str]:
    """The default resolver: every address getaddrinfo gives for a TCP connection, in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _check_response(resp: http.client.HTTPResponse, limits: ImageLimits) -> None:
    """Refuse a status other than 200, a non-image content type, or a Content-Length over the cap."""
    if resp.status != 200:
        raise ImageRefused(f"image_url: the server answered {resp.status}")
    ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
    if ctype not in _MIME_TYPES:
        raise ImageRefused(f"image_url: content type {ctype or '(none)'} is not an image ({_KINDS})")
    if resp.length is not None and resp.length > limits.max_bytes:
        raise _too_big(resp.length, limits)


def _read_capped(resp: http.client.HTTPResponse, limits: ImageLimits, clock: _Clock) -> bytes:
    """The body, read in chunks and refused as soon as it passes max_bytes."""
    body = bytearray()
    while chunk := resp.read(65536):
        body += chunk
        if len(body) > limits.max_bytes:
            raise ImageRefused(f"image_url: the image is over the limit of {_size(limits.max_bytes)} "
                               "(--limit image_bytes=N)")
    clock.left()  # a body cut short by the deadline is no image
    return bytes(body)
