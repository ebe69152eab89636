"""One HTTP request to a test server on 127.0.0.1, shared by the tests/http scripts."""
import http.client
import json


def request(port, method, path, body=None, raw=None, headers=None, timeout=60):
    """body: JSON-encoded (Content-Type set unless given); raw: bytes sent as they are.
    -> (status, {lower-case header: value}, response bytes)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, out


def as_json(raw):
    """the body parsed as JSON, or the bytes when it is not JSON"""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def call(port, method, path, body=None, timeout=120):
    """One request, JSON body or none -> (status, the reply parsed as JSON when it is an object
    or array, else its text); HTTP errors are returned, not raised."""
    st, _, raw = request(port, method, path, body=body, timeout=timeout)
    if raw[:1] in (b"{", b"["):
        try:
            return st, json.loads(raw)
        except ValueError:
            pass
    return st, raw.decode("utf-8", "replace") if raw else ({} if st >= 400 else "")
