"""The built-in page over HTTP (tests/cli/web.sh): GET / and every asset it reaches (script
and stylesheet links, JS imports), their Content-Type, the Content-Security-Policy, that
nothing refers to another origin or inlines script, ETag/304, the 404s of names that are not
assets (no path reaches the filesystem), and --api-key: the page loads without the key, the
API behind it does not.

usage: web.py open PORT WEBDIR          (WEBDIR: the source web/, to compare the bytes)
       web.py guarded PORT WEBDIR KEY"""
import html.parser
import http.client
import os
import re
import sys

from tap import ok

PORT = 0
CTYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}


def get(path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.putrequest(method, path, skip_accept_encoding=True)  # the path is sent exactly as given
    for k, v in (headers or {}).items():
        c.putheader(k, v)
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, body


class Refs(html.parser.HTMLParser):
    """Every URL the HTML refers to, inline scripts and styles, handler attributes."""

    def __init__(self):
        super().__init__()
        self.urls, self.inline, self.handlers, self._in_script = [], [], [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k, v in attrs:
            if k.startswith("on"):
                self.handlers.append((tag, k))
            if k == "style":
                self.inline.append((tag, "style attribute"))
            if k in ("src", "href", "action", "formaction", "poster", "data") and v is not None:
                self.urls.append(v)
        if tag == "script":
            self._in_script = "src" not in a
        if tag == "style":
            self.inline.append(("style", "element"))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline.append(("script", data.strip()[:60]))


def same_origin_path(u):
    """A path on this server: starts with one '/', no scheme, no host."""
    return u.startswith("/") and not u.startswith("//") and not re.match(r"^[a-z][a-z0-9+.-]*:", u, re.I)


def check_csp(name, h):
    csp = h.get("content-security-policy", "")
    d = {p.strip().split(" ", 1)[0]: p.strip() for p in csp.split(";") if p.strip()}
    good = (d.get("default-src") == "default-src 'none'" and d.get("script-src") == "script-src 'self'"
            and d.get("connect-src") == "connect-src 'self'" and d.get("style-src") == "style-src 'self'"
            and "frame-ancestors 'none'" in csp and "unsafe" not in csp and "http" not in csp and "*" not in csp)
    ok(name + ": CSP allows this origin only, no inline script", good, csp)
    ok(name + ": nosniff", h.get("x-content-type-options") == "nosniff", h)


def crawl(web_dir, headers=None):
    """Fetches / and everything it reaches; returns {path: (status, headers, body)}."""
    seen = {}
    todo = ["/"]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen[p] = get(p, headers)
        st, h, body = seen[p]
        if st != 200:
            continue
        text = body.decode("utf-8", "replace")
        if p == "/":
            refs = Refs()
            refs.feed(text)
            ok("the HTML has no inline script or style and no handler attributes", not refs.inline and not refs.handlers,
               (refs.inline, refs.handlers))
            ok("the HTML refers only to same-origin paths", refs.urls and all(same_origin_path(u) for u in refs.urls), refs.urls)
            todo += [u for u in refs.urls if same_origin_path(u)]
        elif p.endswith(".js"):
            imports = re.findall(r"""(?:^|\s)(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]""", text, re.M)
            imports = [a or b for a, b in imports]
            ok(p + ": imports only sibling modules", all(re.fullmatch(r"\./[\w.-]+\.js", i) for i in imports), imports)
            todo += ["/assets/" + i[2:] for i in imports]
            urls = [u for u in re.findall(r"https?://[^\s'\"]+", text) if u != "http://www.w3.org/2000/svg"]  # a namespace name
            ok(p + ": no other origin named in the code", not urls, urls[:3])
            ok(p + ": no innerHTML / outerHTML / insertAdjacentHTML / document.write / eval",
               not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function", text))
        elif p.endswith(".css"):
            urls = re.findall(r"url\(([^)]*)\)|@import", text)
            ok(p + ": no url() or @import", not urls, urls)
    return seen


def main_open(web_dir):
    pages = crawl(web_dir)
    st, h, body = pages["/"]
    ok("GET / -> 200 text/html", st == 200 and h.get("content-type") == CTYPES[".html"], (st, h))
    ok("GET / serves web/index.html byte for byte", body == open(os.path.join(web_dir, "index.html"), "rb").read())
    check_csp("/", h)
    assets = [p for p in pages if p != "/"]
    want = sorted(f for f in os.listdir(web_dir) if os.path.splitext(f)[1] in CTYPES and f != "index.html")
    ok("the page reaches every file under web/ (and nothing else)", sorted(p[len("/assets/"):] for p in assets) == want,
       (sorted(assets), want))
    total = 0
    for p in sorted(assets):
        st, h, body = pages[p]
        name = p[len("/assets/"):]
        ext = os.path.splitext(name)[1]
        total += len(body)
        ok(p + ": 200 with Content-Type " + CTYPES.get(ext, "?"), st == 200 and h.get("content-type") == CTYPES.get(ext), (st, h))
        src = os.path.join(web_dir, name)
        ok(p + ": the bytes of web/" + name, os.path.exists(src) and body == open(src, "rb").read())
        check_csp(p, h)
        ok(p + ": ETag and Cache-Control: no-cache", re.fullmatch(r'"[0-9a-f]{16}"', h.get("etag", "")) is not None
           and h.get("cache-control") == "no-cache", h)
    total += len(pages["/"][2])
    print("# page total: %d bytes in %d files" % (total, len(pages)))
    ok("the whole page is at most 120 KB", total <= 120 * 1024, total)

    # conditional GET: the same bytes are a 304 without a body; another tag gets the bytes
    tag = pages["/assets/app.js"][1].get("etag", "")
    st, h, body = get("/assets/app.js", {"If-None-Match": tag})
    ok("If-None-Match with the ETag -> 304, no body", st == 304 and body == b"" and h.get("etag") == tag, (st, h))
    st, _, body = get("/assets/app.js", {"If-None-Match": 'W/"x", ' + tag})
    ok("If-None-Match list (weak tags too) containing the ETag -> 304", st == 304)
    st, _, body = get("/assets/app.js", {"If-None-Match": '"0000000000000000"'})
    ok("another ETag -> 200 with the bytes", st == 200 and body == pages["/assets/app.js"][2])
    st, h, body = get("/", method="HEAD")
    ok("HEAD / -> 200, headers, no body", st == 200 and body == b"" and h.get("content-type") == CTYPES[".html"], (st, h))

    # deep links are the same page (the query string is the page's business)
    for q in ("/?describe=France", "/?walk=The%20capital%20of%20France%20is", "/?infer=x&mode=dense",
              "/?describe=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"):
        st, h, body = get(q)
        ok("GET %s -> the page" % q, st == 200 and body == pages["/"][2])

    # names that are not assets: 404, whatever they look like; nothing reaches the filesystem
    for p in ("/assets/nope.js", "/assets/index.htm", "/assets/APP.JS", "/assets/app.js.bak", "/assets/.app.js",
              "/assets/", "/assets", "/assets/a/b.js", "/assets/../../etc/passwd", "/assets/..%2f..%2fetc%2fpasswd",
              "/assets/%2e%2e", "/assets/app.js%00.css", "/assets/" + "a" * 5000 + ".js",
              "/index.html", "/app.js", "/web/app.js", "/etc/passwd", "//assets/app.js"):
        st, h, body = get(p)
        ok("GET %s -> 404" % p[:60], st == 404 and b"root:" not in body, (st, body[:200]))
    st, h, body = get("/assets/nope.js")
    ok("an unknown asset's 404 names it, as JSON", b"nope.js" in body and h.get("content-type") == "application/json", body)
    st, h, _ = get("/", method="POST")
    ok("POST / -> 405 Allow: GET", st == 405 and h.get("allow") == "GET", (st, h))

    # the routes counters know the page
    st, _, body = get("/v1/stats")
    ok("/v1/stats counts the page's requests by route", st == 200 and b'"/":{' in body and b'"/assets/{name}":{' in body, body[:300])


def main_guarded(web_dir, key):
    pages = crawl(web_dir)
    ok("with --api-key, / and every asset load without the key",
       all(v[0] == 200 for v in pages.values()) and len(pages) > 3, {k: v[0] for k, v in pages.items()})
    for p in ("/v1/runtime", "/v1/stats", "/v1/describe?entity=France", "/v1/patches"):
        st, h, _ = get(p)
        ok("with --api-key, %s without the key -> 401" % p, st == 401, st)
        st, h, _ = get(p, {"Authorization": "Bearer " + key})
        ok("with --api-key, %s with the key -> 200" % p, st == 200, st)
    st, h, _ = get("/assets/nope.js")
    ok("with --api-key, an unknown asset is a 404 (not a 401)", st == 404, st)


if __name__ == "__main__":
    PORT = int(sys.argv[2])
    if sys.argv[1] == "open":
        main_open(sys.argv[3])
    else:
        main_guarded(sys.argv[3], sys.argv[4])
