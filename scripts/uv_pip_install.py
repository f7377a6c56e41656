"""``uv pip install ARGS`` into this interpreter's environment, looking for packages where its pip would.

uv does not read pip's configuration (pip.conf at every level, ``PIP_*``), and ``scripts/setup``
installs with uv: this asks pip itself how it would run ``pip install`` (its own parser, so its
rules hold: ``[install]`` over ``[global]``, variables over files, ``~`` expanded, empty values
ignored) and gives uv the same index, extra indexes, local wheel directories, hosts trusted
without TLS, ``no-index``, constraints, pre-releases, binary-only or source-only packages, CA
bundle, client certificate, proxy and timeout, and pip's strategy across indexes (the best version
from any index, not only from the first that has the package). Indexes go to uv in its variables,
not its command line, where ``ps`` would show credentials in their URLs.

uv's own configuration is left out (``--no-config``, and no ``UV_*`` variable of the caller's but
the cache's place): a ``uv.toml`` or a variable meant for other projects could install errand
somewhere else or from another index. The CA bundle is the one pip's HTTP library takes:
``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE``, else pip's ``cert``; without one, the system's
certificate store, as Debian's pip (``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, which pip does not
read, are not passed on).

    .venv/bin/python scripts/uv_pip_install.py -e ".[dev]"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pip._internal.commands import create_command


def uv_settings(*, hashed: bool = False) -> tuple[dict[str, str], list[str]]:
    """The environment and options that make uv look where ``pip install`` would. ``hashed``: for an
    install of requirements pinned by hash, which pip's constraints cannot move and uv refuses
    beside constraints that are not pinned by hash themselves: they are left out."""
    options, _ = create_command("install").parse_args([])
    env = {"UV_INDEX_URL": options.index_url, "UV_EXTRA_INDEX_URL": " ".join(options.extra_index_urls),
           "UV_FIND_LINKS": " ".join(os.path.expanduser(link) for link in options.find_links),
           "UV_INDEX_STRATEGY": "unsafe-best-match"}
    args = [arg for host in options.trusted_hosts for arg in ("--allow-insecure-host", host)]
    if not hashed:
        args += [arg for constraint in options.constraints for arg in ("--constraints", constraint)]
    if options.no_index:
        args.append("--no-index")
    if options.pre:
        args += ["--prerelease", "allow"]
    for flag, names in (("--no-binary", options.format_control.no_binary),
                        ("--only-binary", options.format_control.only_binary)):
        args += [arg for name in sorted(names) for arg in (flag, name)]
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or options.cert
    if bundle:
        env["SSL_CERT_DIR" if os.path.isdir(bundle) else "SSL_CERT_FILE"] = bundle
    else:
        env["UV_SYSTEM_CERTS"] = "1"
    if options.client_cert:
        env["SSL_CLIENT_CERT"] = options.client_cert
    if options.proxy:  # pip's --proxy is used for every host, whatever NO_PROXY says
        env["HTTP_PROXY"] = env["HTTPS_PROXY"] = options.proxy
        env["NO_PROXY"] = env["no_proxy"] = ""
    env["UV_HTTP_TIMEOUT"] = format(options.timeout, "g")
    return {key: value for key, value in env.items() if value or key in ("NO_PROXY", "no_proxy")}, args


def _passed_on(key: str) -> bool:
    """Whether the caller's variable reaches uv: not uv's own settings (but where its cache is), nor
    the CA locations pip does not read."""
    return key == "UV_CACHE_DIR" or not (key.startswith("UV_") or key in ("SSL_CERT_FILE", "SSL_CERT_DIR"))


def main() -> None:
    env, args = uv_settings(hashed="--require-hashes" in sys.argv)
    uv = Path(sys.executable).with_name("uv")
    inherited = {key: value for key, value in os.environ.items() if _passed_on(key)}
    os.execve(uv, [str(uv), "pip", "install", "-q", "--no-config", "--python", sys.executable, *args,
                   *sys.argv[1:]], {**inherited, **env})


if __name__ == "__main__":
    main()
