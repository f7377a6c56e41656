"""Print, one per line, the uv options that make ``uv pip install`` look for packages where pip would.

uv does not read pip's configuration (pip.conf, ``PIP_*``); ``scripts/setup`` installs with uv and
passes it these: pip's index, extra indexes, local wheel directories, hosts trusted without TLS and
``no-index``, read from pip itself, and uv's ``unsafe-best-match`` strategy, which is pip's: the best
version from any index, not only from the first that has the package. Run with the interpreter
whose pip is configured (the virtualenv's, made from the system's). With ``--cert``, print the CA
bundle pip is told to trust instead (uv takes it as ``SSL_CERT_FILE``), or nothing.
"""

from __future__ import annotations

import sys

from pip._internal.configuration import Configuration

_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links",
          "trusted-host": "--allow-insecure-host"}


def main() -> None:
    configuration = Configuration(isolated=False)
    configuration.load()
    settings: dict[str, str] = {}
    for key, value in configuration.items():  # the files first, the PIP_* variables last: the last wins
        settings[key.rpartition(".")[2]] = value
    if sys.argv[1:] == ["--cert"]:
        print(settings.get("cert", ""))
        return
    options = ["--index-strategy", "unsafe-best-match"]
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    for key, flag in _LISTS.items():
        for value in settings.get(key, "").split():
            options += [flag, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    print("\n".join(options))


if __name__ == "__main__":
    main()
