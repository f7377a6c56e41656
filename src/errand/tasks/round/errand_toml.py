"""errand.toml as a pydantic model: every table and key, its type, default and meaning.

:class:`ErrandToml` is the file's shape, strict (no key errand does not know, no
coercion: ``"512"`` is not a number). :func:`read` validates a parsed document
against it and turns pydantic's errors into one :class:`~errand.errors.ConfigError`
naming the file, the key (``[setup] network.registries``), what was expected and
what was found; an unknown key gets the nearest known one as a suggestion. The
same model gives the JSON Schema editors read (:func:`json_schema`, committed as
``docs/errand.schema.json``) and the reference section of ``docs/errand-toml.md``
(:func:`reference`). What the values mean to errand — an image, a network policy,
resource limits — is :class:`~errand.tasks.round.environment.Environment`'s to build.
"""

from __future__ import annotations

import difflib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from errand.errors import ConfigError
from errand.sandbox.config import DiskMedium, Resources
from errand.tasks.round.defaults import DEFAULT_INSTRUCTIONS, WHOLE_TREE

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "WHOLE_TREE",
    "AgentTable",
    "CommandTable",
    "ErrandToml",
    "ImageStep",
    "ImageTable",
    "NetworkTable",
    "ResourcesTable",
    "SetupNetworkTable",
    "SetupTable",
    "json_schema",
    "published",
    "read",
    "reference",
    "schema_text",
]

#: The agents and registry kinds a file may name (pinned to errand.agent.seam.AGENT_KINDS and
#: errand.sandbox.registries.REGISTRY_KINDS by a test: the model cannot import the agent layer's list).
AgentKind = Literal["errand", "claude-code", "codex", "gemini-cli", "opencode", "mini-swe-agent", "aider"]
RegistryKind = Literal["pip", "npm", "apt"]


@dataclass(frozen=True)
class Expected:
    """What a key takes, in words (``a list of non-empty strings``): the error's "expected" and
    the reference's type column. ``code`` is the ConfigError code for a wrong value under it."""

    words: str
    code: str | None = None


def _relative(name: str) -> str:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or "\0" in name:
        raise PydanticCustomError("invalid_config", "{name} must be relative to the repository, without '..'",
                                  {"name": repr(name)})
    return name


NonBlank = Annotated[str, StringConstraints(pattern=r"\S")]
RelativePath = Annotated[NonBlank, AfterValidator(_relative)]
Commands = Annotated[list[NonBlank], Expected("a list of non-empty strings")]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True)
    #: The ConfigError code of a key this table does not have.
    unknown_code: ClassVar[str] = "unknown_key"


def _step(words: str) -> Expected:
    return Expected(words, code="invalid_image_step")


_Packages = Annotated[NonBlank | list[NonBlank] | None, _step("a package or a list of packages")]


class ImageStep(_Table):
    """One step of the image: a table with exactly one of these keys."""

    unknown_code: ClassVar[str] = "invalid_image_step"  # an unknown step, as Image.from_steps says

    base: Annotated[bool | None, _step("a boolean")] = None
    """The default base (the host's read-only /usr); first step only."""
    debian: Annotated[NonBlank | None, _step("a Debian suite name")] = None
    """A Debian root of this suite (``bookworm``); first step only. apt needs it."""
    run: Annotated[NonBlank | list[NonBlank] | None, _step("a command or a list of commands")] = None
    """Shell commands, each a cached layer."""
    pip_install: _Packages = None
    """Python packages, installed with the host's pip settings."""
    apt_install: _Packages = None
    """Debian packages (after a ``debian`` step)."""
    copy_: Annotated[list[NonBlank] | None, Field(min_length=2, max_length=2, alias="copy"),
                     _step("[source, target]")] = None
    """``[source, target]``: a path of the repository copied to a path in the image."""
    env: Annotated[dict[str, str] | None, _step("a table of strings")] = None
    """Environment variables."""
    workdir: Annotated[NonBlank | None, _step("an absolute path")] = None
    """The working directory of later steps."""

    @model_validator(mode="after")
    def _one_key(self) -> ImageStep:
        if len(self.model_fields_set) != 1:
            raise PydanticCustomError("invalid_image_step", "an image step has exactly one key (such as run), "
                                      "not {count}", {"count": len(self.model_fields_set)})
        return self

    def as_step(self) -> dict[str, Any]:
        """The step as :meth:`errand.sandbox.image.Image.from_steps` reads it."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class ImageTable(_Table):
    """What the task's sandbox image is built from (as ``Image.from_steps``)."""

    steps: Annotated[list[ImageStep], Expected("a list of one-key tables such as {run = \"...\"}")] = []
    """The image's steps in order, after the default base unless the first is ``base`` or ``debian``."""


class NetworkTable(_Table):
    """Egress allowlist: deny by default."""

    mode: Annotated[Literal["none", "allow", "open"] | None,
                    Expected("one of none, allow, open", code="invalid_network")] = None
    """``none`` (loopback only), ``allow`` (only ``domains`` and ``cidrs``) or ``open`` (any public address);
    default ``allow`` when domains or cidrs are given, else ``none``."""
    domains: Commands = []
    """Names (``*.example.org`` for its subdomains); TLS to 443, plain HTTP to 80, ``name:8443`` for another
    port."""
    cidrs: Commands = []
    """Networks (``203.0.113.0/24``), each optionally with ``:port``."""


class SetupNetworkTable(NetworkTable):
    """Setup's own egress: ``mode``, ``domains``, ``cidrs`` as in ``[network]``, plus ``registries``."""

    registries: Annotated[list[RegistryKind], Expected("a list of pip, npm, apt")] = []
    """The host's package registries setup may reach: exactly the hosts the host's own pip, npm or apt
    are configured for."""


class SetupTable(_Table):
    """Commands run once per environment over the base commit; what they make is cached."""

    commands: Commands = []
    """Shell commands run in order at ``/workspace``."""
    network: Annotated[SetupNetworkTable | None, Expected("a table such as {registries = [\"pip\"]}")] = None
    """Setup's egress; without it, the same policy as the agent's ``[network]``."""
    key: Annotated[Literal["tree"] | Annotated[list[RelativePath], Field(min_length=1)] | None,
                   Expected("\"tree\" or a non-empty list of paths or globs")] = None
    """What of the tree the setup cache is keyed on: globs of files (their bytes), or ``"tree"`` (every
    file: no reuse across commits); default the lockfiles and manifests' dependency tables."""
    refresh: Annotated[list[NonBlank] | None, Expected("a list of non-empty strings")] = None
    """Commands run over a cached environment for each new commit; default derived from the project."""


class CommandTable(_Table):
    """A check run in the sandbox."""

    command: Annotated[NonBlank | None, Expected("a non-empty shell command string")] = None
    """The shell command; exit 0 passes."""


_RESOURCE_DEFAULTS = inspect.signature(Resources).parameters
_Size = Annotated[int | str, Expected("a size such as \"2GiB\" or a byte count")]


class ResourcesTable(_Table):
    """Limits the kernel enforces on the sandbox."""

    cpus: Annotated[float | None, Expected("a number")] = _RESOURCE_DEFAULTS["cpus"].default
    """CPU share (``1.5``); default no limit."""
    memory: _Size = _RESOURCE_DEFAULTS["memory"].default
    """Memory limit (at least 16MiB)."""
    pids: Annotated[int, Expected("an integer")] = _RESOURCE_DEFAULTS["pids"].default
    """Process count limit (at least 8)."""
    disk: _Size = _RESOURCE_DEFAULTS["disk"].default
    """Cap on what the sandbox writes (at least 1MiB)."""
    disk_medium: Annotated[DiskMedium, Expected("one of auto, memory, disk",
                                                code="invalid_limit")] = _RESOURCE_DEFAULTS["disk_medium"].default
    """Where the writable layer lives: ``memory`` (tmpfs), ``disk`` (a file system of its own) or ``auto``
    (memory when ``disk`` fits within ``memory``)."""


class AgentTable(_Table):
    """The agent tasks of this repository get, what it reads, and its budgets."""

    kind: Annotated[AgentKind | None, Expected("one of " + ", ".join(get_args(AgentKind)), code="unknown_agent")] = None
    """The agent unless a task says otherwise; default errand's own (see agents.md)."""
    instructions: Annotated[list[RelativePath], Expected("a list of paths")] = list(DEFAULT_INSTRUCTIONS)
    """Project instruction files given to the agent, in order (``[]`` for none)."""
    max_steps: Annotated[int | None, Expected("an integer", code="invalid_budget")] = None
    """Model calls per run; default the engine's."""
    max_tokens: Annotated[int | None, Expected("an integer", code="invalid_budget")] = None
    """Input plus output tokens per run."""
    max_cost: Annotated[int | float | None, Expected("a number of US dollars", code="invalid_budget")] = None
    """US dollars per run."""
    max_minutes: Annotated[int | float | None, Expected("a number of minutes")] = None
    """Working minutes per run (time waiting for a person's answer does not count)."""

    @model_validator(mode="before")
    @classmethod
    def _kind_in_any_case(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("kind"), str):  # "Claude-Code " reads as claude-code
            return {**data, "kind": data["kind"].strip().lower()}
        return data


class ErrandToml(_Table):
    """A repository's errand.toml: what shapes a task's environment. Every table is optional."""

    model_config = ConfigDict(title="errand.toml")

    image: ImageTable = ImageTable()
    setup: SetupTable = SetupTable()
    test: CommandTable = CommandTable()
    lint: CommandTable = CommandTable()
    network: NetworkTable = NetworkTable()
    resources: ResourcesTable = ResourcesTable()
    agent: AgentTable = AgentTable()


# ------------------------------------------------------------------ reading


def read(document: dict[str, Any], path: Path) -> ErrandToml:
    """``document`` (a parsed errand.toml) as the model, or the first thing wrong with it as a ConfigError
    naming ``path`` and the key."""
    try:
        return ErrandToml.model_validate(document)
    except ValidationError as error:
        raise _config_error(_first(error.errors()), document, path) from None


def _config_error(detail: ErrorDetails, document: dict[str, Any], path: Path) -> ConfigError:
    keys, models, (expected, depth) = _walk(tuple(detail["loc"]))
    if detail["type"] == "extra_forbidden":
        return _unknown(keys, models[-1], path)
    if detail["type"] in _OWN_ERRORS:
        return ConfigError(f"{path}: {_where(keys)}: {detail['msg']}", code=detail["type"])
    words = expected.words if expected is not None else detail["msg"].lower()
    keys = keys[:depth]  # the key whose words these are, and its whole value
    return ConfigError(f"{path}: {_where(keys)}: expected {words} (got {_shown(_at(document, keys))})",
                       code=expected.code if expected is not None and expected.code else "invalid_config")


#: The errors errand's own validators raise: their type is the ConfigError code, their message the text.
_OWN_ERRORS = frozenset({"invalid_config", "invalid_image_step"})


def _first(errors: list[ErrorDetails]) -> ErrorDetails:
    """The error to report: an unknown key or one of errand's own checks before a type mismatch, which
    a union reports once per branch (``key = ["../x"]`` is not "tree", and its path goes outside)."""
    return next((error for error in errors if error["type"] in _OWN_ERRORS | {"extra_forbidden"}), errors[0])


def _walk(loc: tuple[Any, ...]) -> tuple[list[str | int], list[type[_Table]], tuple[Expected | None, int]]:
    """The keys of ``loc`` as the file has them (pydantic's names of union branches and a table's
    keys inside a value left out), the tables met on the way, and the innermost :class:`Expected`
    with the number of keys that lead to it."""
    model: type[_Table] | None = ErrandToml
    models: list[type[_Table]] = [ErrandToml]
    keys: list[str | int] = []
    expected: tuple[Expected | None, int] = (None, 0)
    for part in loc:
        if isinstance(part, int):
            keys.append(part)
            continue
        if model is None:
            continue
        keys.append(part)
        info = _field(model, part)
        if info is None:  # a key the table does not have
            break
        found = _expected(info)
        expected = (found, len(keys)) if found is not None else expected
        model = _model_of(info)
        if model is not None:
            models.append(model)
    return keys, models, expected


def _expected(info: FieldInfo) -> Expected | None:
    found = next((item for item in info.metadata if isinstance(item, Expected)), None)
    if found is None and _model_of(info) is not None:
        return Expected("a table")
    return found


def _field(model: type[_Table], name: str) -> FieldInfo | None:
    return next((info for key, info in model.model_fields.items() if (info.alias or key) == name), None)


def _model_of(info: FieldInfo) -> type[_Table] | None:
    """The table model a field holds (directly, in a list, or optionally)."""
    stack: list[Any] = [info.annotation]
    while stack:
        kind = stack.pop()
        if isinstance(kind, type) and issubclass(kind, _Table):
            return kind
        stack.extend(getattr(kind, "__args__", ()))
    return None


def _unknown(keys: list[str | int], table: type[_Table], path: Path) -> ConfigError:
    name = str(keys[-1])
    known = [info.alias or key for key, info in table.model_fields.items()]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    code = table.unknown_code
    if table is ErrandToml:
        hint = f" (did you mean [{close[0]}]?)" if close else ""
        return ConfigError(f"{path}: unknown table [{name}]{hint}; errand.toml has "
                           f"{', '.join(f'[{key}]' for key in known)}", code=code)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(f"{path}: unknown key {_where(keys)}{hint}; {_where(keys[:-1])} has {', '.join(known)}",
                       code=code)


def _where(keys: list[str | int]) -> str:
    """``[setup] network.registries``, ``[image] steps[2].run``, ``[test]``: a key as the file has it."""
    if not keys:
        return "the top level"
    text = ""
    for key in keys[1:]:
        text += f"[{key + 1}]" if isinstance(key, int) else f".{key}"
    return f"[{keys[0]}]" + (f" {text.removeprefix('.')}" if text else "")


def _at(document: Any, keys: list[str | int]) -> Any:
    for key in keys:
        try:
            document = document[key]
        except (KeyError, IndexError, TypeError):
            return None
    return document


def _shown(value: object) -> str:
    kind = {str: "string", int: "integer", float: "float", bool: "boolean", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)
    return f"{kind} {value!r}"


# ------------------------------------------------------------------ publishing


def json_schema() -> dict[str, Any]:
    """The JSON Schema of errand.toml, for editors (taplo, Even Better TOML) and ``errand config schema``.

    Written for JSON Schema draft 4, the draft taplo reads: one self-contained document (no
    ``$ref``, beside which taplo ignores a key's documentation), TOML's types only (no ``null``,
    which TOML has not), ``enum`` for a single allowed value.
    """
    schema = ErrandToml.model_json_schema(by_alias=True)
    definitions = schema.pop("$defs", {})
    return {"$schema": "http://json-schema.org/draft-04/schema#", **_for_editors(schema, definitions, top=True)}


def _for_editors(node: Any, definitions: dict[str, Any], *, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_for_editors(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    while (simpler := _simplified(node, definitions)) != node:
        node = simpler
    shaped: dict[str, Any] = {}
    for key, value in node.items():
        if (key == "default" and (value is None or isinstance(value, dict))) or (key == "title" and not top):
            continue  # no default to show (a table's are its keys'), or pydantic's title made of the field's name
        if key == "properties":
            shaped[key] = {name: _for_editors(item, definitions) for name, item in value.items()}
        else:
            shaped[key] = _prose(value) if key == "description" else (
                value if key in ("default", "enum") else _for_editors(value, definitions))
    return shaped


def _simplified(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One schema object a step nearer what taplo reads well: a ``$ref`` inlined, the ``null``
    branch of an optional key dropped, a ``const`` written as an ``enum``."""
    if "$ref" in node:
        return {**definitions[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    rest = {key: value for key, value in node.items() if key not in ("anyOf", "const")}
    branches = [branch for branch in node.get("anyOf", []) if branch != {"type": "null"}]
    if len(branches) == 1:
        rest.update(branches[0])
    elif branches:
        rest["anyOf"] = branches
    if "const" in node:
        rest["enum"] = [node["const"]]
    return rest


def schema_text() -> str:
    """:func:`json_schema` as the committed ``docs/errand.schema.json`` holds it."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


REFERENCE_START = ("<!-- reference: generated from errand.tasks.round.errand_toml by scripts/gen_toml_reference.py; "
                   "edit the model, not this section -->")
REFERENCE_END = "<!-- end of the generated reference -->"


def published(page: str) -> dict[str, str]:
    """What the model publishes in docs/, by file name: the JSON Schema, and ``page`` (docs/errand-toml.md)
    with the section between its reference markers made :func:`reference`."""
    before, start, rest = page.partition(REFERENCE_START)
    _, end, after = rest.partition(REFERENCE_END)
    if not start or not end:
        raise ValueError("docs/errand-toml.md has lost its reference markers")
    return {"errand.schema.json": schema_text(),
            "errand-toml.md": f"{before}{REFERENCE_START}\n\n{reference()}\n{REFERENCE_END}{after}"}


def reference() -> str:
    """The reference section of docs/errand-toml.md: each table, and each key's type, default and meaning."""
    parts = []
    for table, info in ErrandToml.model_fields.items():
        model = _model_of(info)
        assert model is not None
        parts.append(f"### `[{table}]`\n\n{_doc(model)}\n\n| key | takes | default | what it is |\n|---|---|---|---|")
        for key, field in model.model_fields.items():
            expected = next((item for item in field.metadata if isinstance(item, Expected)), None)
            takes = expected.words if expected is not None else "a table"
            if field.annotation is not None and _model_of(field) is ImageStep:
                takes = "a list of one-key tables (below)"
            parts[-1] += (f"\n| `{field.alias or key}` | {_cell(takes)} | {_default(field)} | "
                          f"{_cell(field.description or '')} |")
        if model is ImageTable:
            parts.append(_steps())
    return "\n\n".join(parts) + "\n"


def _steps() -> str:
    rows = [f"| `{field.alias or key}` | {_cell(field.description or '')} |"
            for key, field in ImageStep.model_fields.items()]
    return f"{_doc(ImageStep)}\n\n| step | what it does |\n|---|---|\n" + "\n".join(rows)


def _doc(model: type[BaseModel]) -> str:
    return _prose(model.__doc__ or "")


def _prose(docstring: str) -> str:
    """A docstring as one line of Markdown (the docstrings' ``code`` written `code`)."""
    return " ".join(docstring.split()).replace("``", "`")


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None or value == [] or isinstance(value, BaseModel):
        return "—"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|")
