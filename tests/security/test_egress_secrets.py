"""Declared secrets: the sandbox holds a placeholder, the proxy swaps the value in for the declared host.

Through the real proxy and a real sandbox, against the test host's HTTPS server
(signed by the tests' own CA, which the proxy is told to trust for upstream
verification with ``ERRAND_EGRESS_CA_FILE``). The test host records every
request's headers, so what reached it is asserted, not assumed.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from errand import AsyncSandbox, ExecResult, Network, Secret
from errand.sandbox._egress.intercept import CA_PATH
from errand.sandbox._handle import _egress_proxy
from nethosts import ALLOWED, OTHER, EgressHosts, TestCA, TestHost
from security.test_egress import events_for, eventually, probe, sandbox_with

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes and test hosts need root"),
              pytest.mark.slow]

# Runs inside the sandbox: every process's environment and command line, every file under the
# places configuration and state live, and every other file changed since the sandbox was made
# (errand could write nothing into it before; the image's own files are older), searched for each
# needle. The needles come reversed, so this process's own command line does not hold them. The
# image's binds of the host's own directories (the base image's /usr: 138,000 entries, most of the
# walk, and in gVisor most of the test's CPU) are not walked: read-only inside, and errand writes
# nothing into the host's /usr. What errand itself binds in (its agent) is walked like the rest.
SEARCH = r'''
import json, os, sys
since = float(sys.argv[1])
skipped = set(json.loads(sys.argv[2]))
needles = [bytes.fromhex(arg)[::-1] for arg in sys.argv[3:]]
everything = ("/etc/", "/tmp/", "/run/", "/root/", "/home/", "/var/", "/workspace/")
hits = []
def check(path):
    try:
        with open(path, "rb") as f:
            data = f.read(64 << 20)
    except OSError:
        return
    hits.extend([index, path] for index, needle in enumerate(needles) if needle in data)
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skipped]
    for name in files:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if os.path.isfile(path) and not os.path.islink(path) and (
                path.startswith(everything) or max(info.st_ctime, info.st_mtime) >= since):
            check(path)
for pid in filter(str.isdigit, os.listdir("/proc")):
    for what in ("environ", "cmdline"):
        check(f"/proc/{pid}/{what}")
print(json.dumps(hits))
'''


async def curl_token(sb: AsyncSandbox, url: str, *options: str) -> ExecResult:
    """curl ``url`` with the sandbox's $API_TOKEN as a bearer token (expanded inside, by its shell)."""
    return await sb.run("sh", "-c", f'curl -sS --max-time 30 {" ".join(options)} '
                                    f'-H "Authorization: Bearer $API_TOKEN" {url}', timeout=60)


# Node has no proxy support of its own: the tunnel by hand, then TLS verified by Node's defaults
# (its bundled roots plus NODE_EXTRA_CA_CERTS).
NODE = r'''
const http = require("http"), tls = require("tls");
const [host, path] = process.argv.slice(2);
http.request({host: "127.0.0.1", port: 3128, method: "CONNECT", path: host + ":443"}).on("connect", (res, socket) => {
  const conn = tls.connect({socket, servername: host}, () => conn.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\n` +
    `Authorization: Bearer ${process.env.API_TOKEN}\r\nConnection: close\r\n\r\n`));
  let data = "";
  conn.on("data", (chunk) => { data += chunk; });
  conn.on("end", () => console.log(data.split("\r\n")[0]));
  conn.on("error", (error) => { console.log("error: " + error.message); process.exitCode = 1; });
}).end();
'''


def headers_of(event: dict[str, object]) -> dict[str, str]:
    lines = event["headers"]
    assert isinstance(lines, list)
    return {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines if ":" in line}


@pytest.fixture
def host(egress_hosts: EgressHosts, test_ca: TestCA, monkeypatch: pytest.MonkeyPatch) -> TestHost:
    """The public test host, whose HTTPS the proxy verifies against the tests' own CA."""
    monkeypatch.setenv("ERRAND_EGRESS_CA_FILE", str(test_ca.cert))
    return egress_hosts.public


async def test_a_declared_secret_reaches_its_host_only_and_never_the_sandbox(
        backend: str, host: TestHost, test_ca: TestCA) -> None:
    value = f"real-{secrets.token_hex(16)}"
    mark = host.mark()
    network = Network.allow(ALLOWED, OTHER)
    since = time.time() - 60  # before the sandbox was made (with room for a clock's coarseness)
    async with sandbox_with(backend, network, test_ca, secrets=[Secret("API_TOKEN", value, hosts=[ALLOWED])],
                            timeout=900) as sb:
        placeholder = (await sb.run("printenv", "API_TOKEN")).stdout.strip()
        assert placeholder.startswith("errand-placeholder-") and value not in placeholder
        # curl trusts the sandbox's CA through CURL_CA_BUNDLE (no --cacert).
        swapped = await curl_token(sb, f"https://{ALLOWED}/swap")
        assert swapped.exit_code == 0, swapped.stderr
        assert swapped.stdout == f"hello from public, host {ALLOWED}\n"
        # Python's default context trusts it through SSL_CERT_FILE; Basic credentials are swapped too.
        script = ("import base64, os, urllib.request\n"
                  "basic = base64.b64encode(('x-access-token:' + os.environ['API_TOKEN']).encode()).decode()\n"
                  f"request = urllib.request.Request('https://{ALLOWED}/basic', "
                  "headers={'Authorization': 'Basic ' + basic})\n"
                  "print(urllib.request.urlopen(request, timeout=30).read().decode(), end='')\n")
        basic = await sb.run("/usr/bin/python3", "-c", script, timeout=60)
        assert basic.exit_code == 0, basic.stderr
        assert basic.stdout == f"hello from public, host {ALLOWED}\n"
        if os.path.exists("/usr/bin/node"):  # the base image is the host's programs
            await sb.files.write("/tmp/tunnel.js", NODE)
            node = await sb.run("/usr/bin/node", "/tmp/tunnel.js", ALLOWED, "/node", timeout=60)
            assert (node.exit_code, node.stdout) == (0, "HTTP/1.1 200 OK\n"), node
        # The same placeholder sent to a host it was not declared for stays a placeholder
        # (that tunnel is not opened: curl verifies the test host's own certificate).
        other = await curl_token(sb, f"https://{OTHER}/leak", "--cacert", "/tmp/ca.pem")
        assert other.exit_code == 0, other.stderr
        # Plain HTTP is never swapped, even to the declared host: the value would cross in the clear.
        plain = await curl_token(sb, f"http://{ALLOWED}/plain")
        assert plain.exit_code == 0, plain.stderr

        # Nothing the sandbox can read holds the value, nor the CA's private key.
        interceptor = _egress_proxy()._interceptors[sb.id]
        key = interceptor._key
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        scalar = key.private_numbers().private_value.to_bytes(32, "big")
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).splitlines()[1]
        await sb.files.write("/tmp/search.py", SEARCH)
        needles = [placeholder.encode(), value.encode(), scalar, pem]  # the placeholder: a control
        binds = [target for _source, target in sb._image.binds]
        assert binds == ["/usr"], binds  # the base image's: a new bind is looked at before it is skipped
        search = await sb.run("/usr/bin/python3", "/tmp/search.py", str(since), json.dumps(binds),
                            *(n[::-1].hex() for n in needles), timeout=600)
        assert search.exit_code == 0, search.stderr
        hits = json.loads(search.stdout)
        assert [path for index, path in hits if index > 0] == []
        assert any(path.endswith("/environ") for _index, path in hits), hits  # the search does find
        assert (await sb.files.read(CA_PATH)) == interceptor.ca_pem
        log = await sb.egress_log()
        # Nor do the proxy's events and logs, or anything the sandbox's record keeps on the host.
        files = [path for path in sb._record.directory.rglob("*") if path.is_file()]
        assert any(path.name == "egress.log" for path in files)
        assert [path for path in files if value.encode() in path.read_bytes()] == []

    served = {e["path"]: e for e in host.events(mark, ev="http")}
    assert headers_of(served["/swap"])["authorization"] == f"Bearer {value}"
    assert served["/swap"]["host"] == ALLOWED
    credentials = headers_of(served["/basic"])["authorization"].removeprefix("Basic ")
    assert base64.b64decode(credentials).decode() == f"x-access-token:{value}"
    assert headers_of(served["/leak"])["authorization"] == f"Bearer {placeholder}"
    if "/node" in served:
        assert headers_of(served["/node"])["authorization"] == f"Bearer {value}"
    assert headers_of(served["/plain"])["authorization"] == f"Bearer {placeholder}"
    swaps = 3 if "/node" in served else 2
    assert [e["sni"] for e in host.events(mark, ev="tls")].count(ALLOWED) == swaps  # re-originated, verified
    assert events_for(log, ALLOWED)
    assert all(value not in json.dumps(vars(event)) for event in log)


@pytest.mark.faults
async def test_a_declared_tunnel_refuses_another_host_inside_it(
        backend: str, host: TestHost, test_ca: TestCA) -> None:
    mark = host.mark()
    network = Network.allow(ALLOWED, OTHER)
    async with sandbox_with(backend, network, test_ca, secrets=[Secret("API_TOKEN", "v" * 20, hosts=[ALLOWED])]) as sb:
        # Classic domain fronting: the tunnel and its TLS name the declared host, the request another.
        fronted = await probe(sb, "connect", f"{ALLOWED}:443", "--cafile", CA_PATH, "--host", OTHER)
        assert fronted["tls"] == "ok", fronted
        assert fronted["http_status"] == 403, fronted
        assert "domain fronting" in fronted["response"]
        # A ClientHello naming another host than the CONNECT is refused before any request.
        misnamed = await probe(sb, "connect", f"{ALLOWED}:443", "--cafile", CA_PATH, "--sni", OTHER)
        assert misnamed.get("tls") != "ok", misnamed
        # A record the TLS cannot read (a forged MAC), sent after the handshake: refused, and logged.
        script = ("import os, socket, ssl\n"
                  "sock = socket.create_connection(('127.0.0.1', 3128))\n"
                  f"sock.sendall(b'CONNECT {ALLOWED}:443 HTTP/1.1\\r\\nHost: {ALLOWED}\\r\\n\\r\\n')\n"
                  "assert sock.recv(4096).startswith(b'HTTP/1.1 200')\n"
                  f"conn = ssl.create_default_context(cafile='{CA_PATH}').wrap_socket(sock, "
                  f"server_hostname='{ALLOWED}')\n"
                  "os.write(conn.fileno(), b'\\x17\\x03\\x03\\x00\\x20' + bytes(32))\n"
                  "try:\n    print(conn.recv(4096))\nexcept (OSError, ssl.SSLError) as error:\n    print(error)\n")
        forged = await sb.run("/usr/bin/python3", "-c", script, timeout=60)
        assert forged.exit_code == 0, forged.stderr
        # The same request, rightly named, goes through.
        right = await probe(sb, "connect", f"{ALLOWED}:443", "--cafile", CA_PATH, "--path", "/right")
        assert right["http_status"] == 200, right


        async def refusals() -> list[str]:
            found = [e.reason for e in events_for(await sb.egress_log(), ALLOWED) if e.verdict == "denied"]
            return found if len(found) >= 3 else []

        reasons = await eventually(refusals)
    assert any("domain fronting" in reason for reason in reasons), reasons
    assert any(f"TLS server name '{OTHER}' does not match" in reason for reason in reasons), reasons
    assert any(reason.startswith("TLS failed inside the tunnel") for reason in reasons), reasons
    assert [(e["path"], e["host"]) for e in host.events(mark, ev="http")] == [("/right", ALLOWED)]


async def test_a_detached_sandbox_swaps_through_its_supervisor(
        backend: str, host: TestHost, test_ca: TestCA) -> None:
    value = f"real-{secrets.token_hex(16)}"
    mark = host.mark()
    sb = await AsyncSandbox.create(isolation=backend, network=Network.allow(ALLOWED), detach=True, timeout=120,
                                   secrets=[Secret("API_TOKEN", value, hosts=[ALLOWED])])
    try:
        swapped = await curl_token(sb, f"https://{ALLOWED}/detached")
        assert swapped.exit_code == 0, swapped.stderr
        supervisors = [pid for pid in os.listdir("/proc") if pid.isdigit()
                       and sb.id.encode() in _read(f"/proc/{pid}/cmdline") and b"supervisor" in _read(
                           f"/proc/{pid}/cmdline")]
        assert supervisors
        for pid in supervisors:  # the value reached it over a pipe: not in its argv or environment
            assert value.encode() not in _read(f"/proc/{pid}/cmdline") + _read(f"/proc/{pid}/environ")
        assert value.encode() not in (sb._record.directory / "supervisor.log").read_bytes()
    finally:
        await sb.terminate()
    [served] = host.events(mark, ev="http")
    assert headers_of(served)["authorization"] == f"Bearer {value}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return b""


@pytest.mark.faults
async def test_an_upstream_that_fails_verification_gets_no_secret(
        backend: str, egress_hosts: EgressHosts, test_ca: TestCA) -> None:
    # The proxy trusts the system's store here, which does not hold the test host's CA: the
    # re-originated TLS must fail, and no request (so no value) reach the host.
    host = egress_hosts.public
    mark = host.mark()
    async with sandbox_with(backend, Network.allow(ALLOWED), test_ca,
                            secrets=[Secret("API_TOKEN", "v" * 20, hosts=[ALLOWED])]) as sb:
        result = await curl_token(sb, f"https://{ALLOWED}/unverified", "-o", "/dev/null", "-w", "%{http_code}")
        assert result.stdout == "502", result
        [refusal] = [e for e in events_for(await sb.egress_log(), ALLOWED) if e.verdict == "denied"]
    assert "CERTIFICATE_VERIFY_FAILED" in refusal.reason, refusal
    assert host.events(mark, ev="http") == []


async def test_errand_sandbox_create_declares_a_secret_from_its_own_environment(
        backend: str, host: TestHost, test_ca: TestCA) -> None:
    value = f"real-{secrets.token_hex(16)}"
    mark = host.mark()
    created = subprocess.run(
        [sys.executable, "-m", "errand.cli", "sandbox", "create", "--allow", ALLOWED, "--timeout", "120",
         "--secret", f"API_TOKEN:{ALLOWED}"], env={**os.environ, "API_TOKEN": value},
        capture_output=True, text=True, timeout=120, check=False)
    assert created.returncode == 0, created.stderr
    sb = await AsyncSandbox.from_id(created.stdout.strip())  # its creator has exited
    try:
        assert (await sb.run("printenv", "API_TOKEN")).stdout.startswith("errand-placeholder-")
        swapped = await curl_token(sb, f"https://{ALLOWED}/cli")
        assert swapped.exit_code == 0, swapped.stderr
    finally:
        await sb.terminate()
    [served] = host.events(mark, ev="http")
    assert headers_of(served)["authorization"] == f"Bearer {value}"
