"""Project-memory scenarios: the second retrieval dataset, written by this project (every sentence is ours).

Where the documentation dataset asks for paragraphs under a heading, this one
asks what a coding agent asks when it starts a task: a question ("how do I run
one test file?") or the task itself ("Add a column for the customer's time
zone to the accounts table"). The memories are what a team's memory holds —
commands that work, conventions, pitfalls, review feedback, preferences — for
a made-up repository, with that repository's own tools, paths, ports and
module names filled in.

Each *topic* below is a few memories and the queries they answer; a query's
relevant memories are its topic's (and, when the query names one of the
project's modules, the memory saying what that module does). A project is
every topic, phrased one of several ways, with its own values, plus one memory
per module; queries are a sample of each topic's. The labels come from how the
topics were written, not from any retriever's output.

    scenarios.build(projects=40, seed=17) -> (memories, queries)   # the rows benchmarks/memory.py reads
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["STACKS", "TOPICS", "Topic", "build"]


@dataclass(frozen=True)
class Topic:
    name: str
    kind: str
    memories: tuple[tuple[str, ...], ...]  # per memory, its alternative phrasings
    questions: tuple[str, ...]
    tasks: tuple[str, ...] = ()  # task descriptions; `{module}` names one of the project's modules


def _t(name: str, kind: str, memories: list[list[str]], questions: list[str], tasks: list[str]) -> Topic:
    return Topic(name, kind, tuple(tuple(m) for m in memories), tuple(questions), tuple(tasks))


TOPICS: tuple[Topic, ...] = (
    _t("tests", "command", [
        ["Run the test suite with `{test}`; a full run takes about {minutes} minutes.",
         "`{test}` runs every test; expect roughly {minutes} minutes on a laptop."],
        ["To run a single test file, pass its path: `{test_one}`.",
         "One file of tests at a time: `{test_one}`."],
    ], ["how do I run the tests?", "what is the command for the unit tests", "how can I run only one test file"],
        ["Fix the off-by-one error in the {module} pagination and check that nothing else breaks",
         "Rerun just the failing test of {module} after the fix"]),
    _t("integration", "pitfall", [
        ["Integration tests need a local {db} on port {port}; start it with `docker compose up -d {db_service}`.",
         "Without {db} listening on {port} the integration tests fail with connection refused; "
         "`docker compose up -d {db_service}` starts it."],
    ], ["integration tests fail with connection refused", "what do the integration tests need running"],
        ["Add an integration test for the {module} repository layer"]),
    _t("lint", "command", [
        ["Lint with `{lint}` before pushing; CI fails on any warning.",
         "`{lint}` must report nothing: the pipeline treats every warning as an error."],
    ], ["which linter does the project use", "CI says lint failed, what should I run locally"],
        ["Clean up the warnings in {module} before opening the pull request"]),
    _t("format", "convention", [
        ["Code is formatted by {formatter}; run `{fmt}` and commit the result.",
         "Formatting is whatever `{fmt}` produces, never hand-aligned."],
    ], ["how should I format my code", "what formatter is used here"],
        ["Reformat the files touched by the {module} refactor"]),
    _t("types", "convention", [
        ["Public functions need type annotations; {typechecker} runs in strict mode in CI.",
         "Every public function is annotated, and {typechecker} checks it strictly on each push."],
    ], ["are type annotations required", "which type checker runs in CI"],
        ["Add a helper that parses price strings in {module}"]),
    _t("migrations", "pitfall", [
        ["Database migrations are generated with `{migrate}`, never written by hand.",
         "Generate schema migrations with `{migrate}`; hand-written ones drifted from the models before."],
        ["Every migration must be reversible: reviewers reject one without a downgrade step.",
         "A migration without its downgrade is sent back in review."],
    ], ["how do I create a database migration", "can I edit the schema by hand"],
        ["Add a column for the customer's time zone to the accounts table",
         "Drop the unused legacy_flags table"]),
    _t("config", "fact", [
        ["Settings come from environment variables prefixed `{prefix}_`; defaults live in `{config_file}`.",
         "Configuration is read from `{prefix}_*` environment variables, falling back to `{config_file}`."],
    ], ["where are the settings defined", "how is the app configured"],
        ["Make the request timeout of {module} configurable"]),
    _t("secrets", "pitfall", [
        ["Local API keys go in `.env`, which git ignores; the app reads `{prefix}_API_KEY` from it.",
         "Never commit keys: put `{prefix}_API_KEY` in the ignored `.env` file."],
    ], ["where do I put the API key for local development", "how do credentials get into the app"],
        ["Connect {module} to the payment provider's sandbox account"]),
    _t("commits", "convention", [
        ["Commit messages follow Conventional Commits: `feat:`, `fix:`, `docs:` and so on.",
         "Start each commit subject with its type, such as `fix:` or `feat:`."],
    ], ["how should I write the commit message", "is there a commit message format"], []),
    _t("branches", "convention", [
        ["Branch from `{main_branch}` and name the branch `{branch_prefix}/<ticket>-<summary>`.",
         "Branches start at `{main_branch}` and are called `{branch_prefix}/<ticket>-<short summary>`."],
    ], ["what should I name my branch", "which branch do I start from"], []),
    _t("pr_size", "preference", [
        ["Reviewers asked to keep pull requests under about {lines} changed lines; split bigger work.",
         "Review feedback: a pull request over {lines} lines is hard to review, so split it."],
    ], ["my change is large, how should I submit it", "is there a limit on pull request size"],
        ["Rewrite the {module} module to use the new client library"]),
    _t("changelog", "convention", [
        ["Every user-visible change gets an entry in `CHANGELOG.md` under Unreleased.",
         "Add a line under Unreleased in `CHANGELOG.md` for anything a user would notice."],
    ], ["do I need to update the changelog", "where are release notes written"],
        ["Fix the crash when an uploaded file is empty, for the next release"]),
    _t("flaky", "pitfall", [
        ["`{flaky_test}` is flaky under load; rerun it alone before suspecting a regression.",
         "`{flaky_test}` sometimes times out on a busy CI runner; run it on its own to check."],
    ], ["a test failed in CI but passes on my machine", "is any test known to be flaky"],
        ["Investigate why the nightly build went red after the {module} change"]),
    _t("time", "pitfall", [
        ["All timestamps are stored in UTC; convert to local time only when rendering.",
         "Keep datetimes in UTC everywhere and localise them in the templates alone."],
    ], ["how are dates stored", "what time zone do timestamps use"],
        ["Show the order date in the customer's local time on the invoice page"]),
    _t("logging", "convention", [
        ["Use the module's logger (`{logger}`), never print statements.",
         "Output goes through `{logger}`; stray print calls are removed in review."],
    ], ["how should I log", "can I use print for debugging output"],
        ["Add debug output to the {module} sync job"]),
    _t("errors", "convention", [
        ["Raise errors from `{errors_module}`; each carries a `code` the API returns to clients.",
         "Exceptions come from `{errors_module}` and have a `code`, which the HTTP layer sends back."],
    ], ["how are errors reported to API clients", "which exception should I raise"],
        ["Return a clear error when the uploaded file is too big"]),
    _t("dependencies", "command", [
        ["Add dependencies with `{add_dep}`, which updates `{lockfile}`; do not edit the lockfile by hand.",
         "`{add_dep}` is how a library gets added; it rewrites `{lockfile}` for you."],
    ], ["how do I add a dependency", "the lockfile is out of date"],
        ["Add a library for parsing YAML to {module}"]),
    _t("docs", "command", [
        ["The documentation site builds with `{docs_cmd}`; pages live in `docs/`.",
         "Build the docs locally with `{docs_cmd}` to preview a page from `docs/`."],
    ], ["how do I build the documentation", "where do the docs live"],
        ["Document the new export option of {module}"]),
    _t("api_version", "convention", [
        ["Public endpoints live under `/api/v{api}`; a breaking change needs a new version.",
         "Never break `/api/v{api}`: incompatible changes go into the next version's routes."],
    ], ["how is the HTTP API versioned", "can I rename a field in an endpoint's response"],
        ["Rename the userName field of the profile endpoint's response"]),
    _t("flags", "convention", [
        ["New features ship behind a flag in `{flags_file}`, off by default.",
         "Unfinished features are hidden behind a switch in `{flags_file}` that defaults to off."],
    ], ["how do feature flags work here", "how do I hide an unfinished feature"],
        ["Add the beta dashboard without turning it on for everyone"]),
    _t("hot_path", "pitfall", [
        ["`{hot_path}` is on the hot path; benchmark with `{bench}` before and after changing it.",
         "Measure with `{bench}` when touching `{hot_path}`: a slowdown there slowed every request."],
    ], ["is there a benchmark suite", "what code is performance sensitive"],
        ["Speed up the search results page"]),
    _t("cache_key", "pitfall", [
        ["Cached responses are keyed by URL alone; a response that varies by header needs its own key.",
         "The response cache ignores headers, so anything negotiated by header must add to the cache key."],
    ], ["how does response caching work", "why do users see each other's language"],
        ["Serve a German page when the browser asks for German"]),
    _t("assets", "command", [
        ["Web assets are built with `{assets}`; the output in `static/dist/` is not committed.",
         "`{assets}` compiles the stylesheets and scripts into `static/dist/`, which git ignores."],
    ], ["how are the frontend assets built", "my CSS change does not show up"],
        ["Change the colour of the primary button"]),
    _t("serve", "command", [
        ["Start the development server with `{serve}`; it reloads on change and listens on port {port2}.",
         "`{serve}` runs the app locally on port {port2} and restarts when a file changes."],
    ], ["how do I run the app locally", "which port does the dev server use"],
        ["Try the new onboarding screens in a browser"]),
    _t("deploy", "fact", [
        ["Deploys go out from `{deploy_branch}` through CI; nobody deploys from a laptop.",
         "Production is deployed by CI when `{deploy_branch}` moves, never by hand."],
    ], ["how do I deploy to production", "who runs the deployment"],
        ["Ship the hotfix for the login outage"]),
    _t("release", "command", [
        ["Releases are tagged `v<major>.<minor>.<patch>`; the version comes from the tag, not from a file.",
         "The package version is derived from the git tag, so tag `vX.Y.Z` to release."],
    ], ["how do I cut a release", "where is the version number set"],
        ["Prepare the 2.4.0 release"]),
    _t("paths", "pitfall", [
        ["Build file paths with `{path_api}`: the tool also runs on Windows.",
         "Windows users run this too, so join paths with `{path_api}`, never with slashes."],
    ], ["does this need to work on Windows", "how should file paths be built"],
        ["Save the export next to the input file"]),
    _t("fixtures", "convention", [
        ["Test fixtures live in `tests/fixtures/`; large ones are generated by `{fixture_cmd}`, not committed.",
         "Small sample files go in `tests/fixtures/`; big ones are made by `{fixture_cmd}` at test time."],
    ], ["where do test data files go", "can I commit a large sample file"],
        ["Add a test with a 50 MB sample upload"]),
    _t("network", "pitfall", [
        ["Tests must not reach the network; HTTP is faked with {http_mock}.",
         "No test may make a real HTTP call: use {http_mock} to fake the server."],
    ], ["how do I mock HTTP requests in tests", "can tests call external services"],
        ["Write tests for the webhook client in {module}"]),
    _t("idempotent", "pitfall", [
        ["Background jobs can run twice after a worker crash, so every job must be idempotent.",
         "A job may be retried after a crash; write each one so that running it twice is harmless."],
    ], ["what should I know about background jobs", "why did a customer get two emails"],
        ["Add a job that sends the weekly summary email"]),
    _t("i18n", "convention", [
        ["User-facing text goes through `{i18n}` so that it can be translated.",
         "Wrap every string a user sees in `{i18n}`; untranslatable strings are sent back in review."],
    ], ["how are strings translated", "is the interface localised"],
        ["Add an error message for an expired password reset link"]),
    _t("labels", "preference", [
        ["Review feedback: every form field needs a visible label; a placeholder is not a label.",
         "Reviewers ask for a visible label on each input, not just placeholder text."],
    ], ["what do reviewers check in forms", "are there accessibility rules"],
        ["Add a phone number field to the signup form"]),
    _t("owners", "fact", [
        ["Changes under `{owned_dir}/` need approval from the {team} team.",
         "The {team} team owns `{owned_dir}/` and must approve changes there."],
    ], ["who needs to review my change", "who owns the {owned_dir} code"],
        ["Change the rounding of invoice totals in `{owned_dir}`"]),
    _t("sql", "pitfall", [
        ["Queries go through the query builder; string-formatted SQL once caused an injection bug.",
         "Never build SQL by formatting strings: an injection bug came from that. Use the query builder."],
    ], ["can I write raw SQL", "how should database queries be written"],
        ["Add a filter by customer name to the orders list"]),
    _t("naming", "convention", [
        ["Names are spelled out: `request`, not `req`; `configuration`, not `cfg`.",
         "No abbreviations in names: write `message`, not `msg`."],
    ], ["naming conventions for variables", "are abbreviations allowed in names"],
        ["Tidy up the variable names in {module}"]),
    _t("squash", "fact", [
        ["Pull requests are squash-merged, so the pull request title becomes the commit message.",
         "Merging squashes the branch; its title is what lands in the history."],
    ], ["how is my pull request merged", "does my commit history matter"], []),
    _t("monorepo", "pitfall", [
        ["This is a monorepo: run commands from the package folder, for example `cd packages/{pkg} && {test}`.",
         "Each package has its own setup; `cd packages/{pkg}` before `{test}` or imports fail."],
    ], ["tests in a sub-package cannot find modules", "where do I run commands from"],
        ["Fix the failing build of the {pkg} package"]),
    _t("hooks", "command", [
        ["Install the git hooks once with `{hooks}`; they run the formatter and the linter on commit.",
         "After cloning, run `{hooks}` so every commit is formatted and linted."],
    ], ["how do I set up my checkout for development", "what runs when I commit"], []),
    _t("ci_cache", "pitfall", [
        ["If CI fails on a stale dependency cache, bump `CACHE_VERSION` in `{ci_file}`.",
         "A stale dependency cache in CI is cleared by raising `CACHE_VERSION` in `{ci_file}`."],
    ], ["CI fails on install after I changed the dependencies", "how do I clear the CI cache"], []),
    _t("memory_limit", "pitfall", [
        ["The {service} container has a {mem} memory limit; reading whole files into memory gets it killed.",
         "Stream large files in {service}: its container is killed above {mem}."],
    ], ["why was the worker killed", "what are the container's memory limits"],
        ["Import the customer CSV export"]),
    _t("ci_timeout", "fact", [
        ["The CI job times out after {ci_minutes} minutes; slow tests are marked `{slow_mark}` and run nightly.",
         "Tests slower than a few seconds carry `{slow_mark}`: CI stops after {ci_minutes} minutes."],
    ], ["how long can CI run", "where do slow tests run"],
        ["Add an end-to-end test of the checkout flow"]),
    _t("rate_limit", "pitfall", [
        ["The {vendor} API allows {rate} requests per minute; batch calls through `{batch}`.",
         "Calls to {vendor} are limited to {rate} a minute, so go through `{batch}`."],
    ], ["are there rate limits on the {vendor} API", "why do we get HTTP 429 errors"],
        ["Sync all products from {vendor} every hour"]),
    _t("deprecated", "convention", [
        ["`{old_func}` is deprecated; use `{new_func}` in new code.",
         "New code calls `{new_func}`; `{old_func}` stays only for old callers."],
    ], ["which date parsing function should I use", "what is deprecated in the codebase"],
        ["Parse the date string from the upload form"]),
    _t("style_person", "preference", [
        ["{person} prefers small functions and early returns over nested conditionals.",
         "{person} asks for early returns and short functions rather than deep nesting."],
    ], ["what does {person} look for in review", "code style preferences of the reviewers"],
        ["Refactor the long validate function in {module}"]),
)

STACKS: tuple[dict[str, str], ...] = (
    {"test": "pytest -q", "test_one": "pytest -q tests/test_orders.py", "lint": "ruff check .", "formatter": "Black",
     "fmt": "black .", "typechecker": "mypy", "migrate": "alembic revision --autogenerate", "add_dep": "uv add",
     "lockfile": "uv.lock", "docs_cmd": "mkdocs build", "logger": "logging.getLogger(__name__)",
     "path_api": "pathlib.Path", "http_mock": "respx", "i18n": "gettext", "slow_mark": "@pytest.mark.slow",
     "hooks": "pre-commit install", "serve": "flask run --debug", "bench": "pytest benchmarks/ --benchmark-only",
     "assets": "npm run build", "fixture_cmd": "python scripts/make_fixtures.py", "old_func": "parse_date_legacy",
     "new_func": "dates.parse"},
    {"test": "npm test", "test_one": "npx jest src/orders.test.ts", "lint": "npx eslint .", "formatter": "Prettier",
     "fmt": "npx prettier --write .", "typechecker": "tsc",
     "migrate": "npx prisma migrate dev", "add_dep": "npm install",
     "lockfile": "package-lock.json", "docs_cmd": "npm run docs", "logger": "logger.child({ module })",
     "path_api": "path.join", "http_mock": "nock", "i18n": "t()", "slow_mark": "@slow", "hooks": "npx husky install",
     "serve": "npm run dev", "bench": "npm run bench", "assets": "npx vite build",
     "fixture_cmd": "node scripts/fixtures.js",
     "old_func": "moment()", "new_func": "dayjs()"},
    {"test": "go test ./...", "test_one": "go test ./internal/orders -run TestTotals", "lint": "golangci-lint run",
     "formatter": "gofmt", "fmt": "gofmt -w .", "typechecker": "go vet", "migrate": "migrate create -ext sql",
     "add_dep": "go get", "lockfile": "go.sum", "docs_cmd": "make docs", "logger": "slog.With(\"pkg\", name)",
     "path_api": "filepath.Join", "http_mock": "httptest.Server", "i18n": "i18n.T", "slow_mark": "//go:build slow",
     "hooks": "make hooks", "serve": "air", "bench": "go test -bench .", "assets": "make assets",
     "fixture_cmd": "go run ./tools/fixtures", "old_func": "util.ParseTime", "new_func": "timeutil.Parse"},
    {"test": "cargo test", "test_one": "cargo test --test orders", "lint": "cargo clippy -- -D warnings",
     "formatter": "rustfmt", "fmt": "cargo fmt", "typechecker": "cargo check", "migrate": "sqlx migrate add",
     "add_dep": "cargo add", "lockfile": "Cargo.lock", "docs_cmd": "mdbook build docs", "logger": "tracing::info!",
     "path_api": "Path::join", "http_mock": "wiremock", "i18n": "fl!()", "slow_mark": "#[ignore]",
     "hooks": "cargo husky install", "serve": "cargo watch -x run", "bench": "cargo bench",
     "assets": "trunk build", "fixture_cmd": "cargo xtask fixtures", "old_func": "parse_legacy_date",
     "new_func": "chrono::DateTime::parse_from_rfc3339"},
    {"test": "make test", "test_one": "make test FILE=tests/orders_test.rb", "lint": "bundle exec rubocop",
     "formatter": "RuboCop", "fmt": "bundle exec rubocop -a", "typechecker": "sorbet",
     "migrate": "bin/rails g migration",
     "add_dep": "bundle add", "lockfile": "Gemfile.lock", "docs_cmd": "bundle exec yard", "logger": "Rails.logger",
     "path_api": "File.join", "http_mock": "WebMock", "i18n": "I18n.t", "slow_mark": ":slow",
     "hooks": "bin/setup-hooks",
     "serve": "bin/rails server", "bench": "bin/bench", "assets": "bin/rails assets:precompile",
     "fixture_cmd": "bin/rake fixtures:generate", "old_func": "Time.parse", "new_func": "Dates.parse"},
)

_MODULES = ("billing", "orders", "accounts", "search", "notifications", "inventory", "reports", "auth", "uploads",
            "shipping", "catalog", "payments", "scheduler", "exports", "audit", "profiles", "webhooks", "pricing")
_PURPOSES = ("computes invoices and credit notes", "takes orders and tracks their state",
             "holds users, teams and their roles", "indexes products and answers search queries",
             "sends email and push messages", "counts stock per warehouse", "renders monthly reports as PDF",
             "signs people in and checks their permissions", "receives files and scans them",
             "books carriers and prints labels", "stores products and their variants",
             "talks to the payment provider", "runs periodic jobs", "writes CSV and spreadsheet exports",
             "records who changed what", "keeps public profile pages", "delivers events to customers' URLs",
             "applies discounts and taxes")
_VALUES: dict[str, tuple[str, ...]] = {
    "db": ("PostgreSQL", "MySQL", "Redis", "MongoDB"), "prefix": ("APP", "SHOP", "ACME", "LEDGER", "ATLAS"),
    "config_file": ("config/defaults.toml", "settings/base.yaml", "app.config.json", "conf/default.ini"),
    "main_branch": ("main", "develop", "trunk"), "branch_prefix": ("feature", "topic", "work"),
    "deploy_branch": ("release", "production", "main"), "team": ("finance", "platform", "payments", "security"),
    "owned_dir": ("billing", "payments", "auth", "ledger"), "service": ("importer", "worker", "api", "reporter"),
    "mem": ("512 MB", "1 GB", "2 GB"), "vendor": ("Shopify", "Stripe", "Zendesk", "HubSpot"),
    "batch": ("vendor.batched()", "clients.bulk_call", "RateLimitedClient"),
    "person": ("Dana", "Priya", "Tomasz", "Aiko", "Mateo"),
    "flags_file": ("config/flags.yaml", "src/flags.ts", "features.toml"),
    "errors_module": ("app/errors.py", "src/errors.ts", "internal/errs", "lib/errors.rb"),
    "ci_file": (".github/workflows/ci.yml", ".gitlab-ci.yml", ".circleci/config.yml"),
    "hot_path": ("render_row", "matchRoute", "price_for", "encodeEvent"),
    "flaky_test": ("test_concurrent_checkout", "test_email_digest_order", "TestWebhookRetry", "uploads spec"),
    "pkg": ("web", "core", "cli", "worker"),
}


def build(projects: int = 40, seed: int = 17) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Memory rows ``{id, project, text, kind, source}`` and query rows ``{id, project, query, relevant, form}``."""
    memories: list[dict[str, object]] = []
    queries: list[dict[str, object]] = []
    for number in range(projects):
        rng = random.Random(f"{seed}-{number}")
        project = f"scenario-{number:02d}"
        values = _values(rng)
        modules = rng.sample(range(len(_MODULES)), 10)
        by_module = {}
        for index in modules:
            memory_id = f"{project}-m{len(memories)}"
            memories.append({"id": memory_id, "project": project, "kind": "fact", "source": "scenarios.py",
                             "text": f"The `{_MODULES[index]}` module {_PURPOSES[index]}; its code is in "
                                     f"`src/{_MODULES[index]}/`."})
            by_module[_MODULES[index]] = memory_id
        for topic in TOPICS:
            ids = []
            for phrasings in topic.memories:
                ids.append(f"{project}-m{len(memories)}")
                memories.append({"id": ids[-1], "project": project, "kind": topic.kind, "source": "scenarios.py",
                                 "text": rng.choice(phrasings).format(**values)})
            asked = [("question", text) for text in rng.sample(topic.questions, 1)]
            asked += [("task", text) for text in rng.sample(topic.tasks, min(1, len(topic.tasks)))]
            for form, text in asked:
                module = _MODULES[rng.choice(modules)]
                relevant = list(ids)
                if "{module}" in text:
                    relevant.append(by_module[module])
                queries.append({"id": f"{project}-q{len(queries)}", "project": project, "form": form,
                                "query": text.format(**values, module=module), "relevant": relevant})
    return memories, queries


def _values(rng: random.Random) -> dict[str, str]:
    values = dict(rng.choice(STACKS))
    values.update({name: rng.choice(options) for name, options in _VALUES.items()})
    values.update(minutes=str(rng.randint(2, 25)), port=str(rng.choice((5432, 3306, 6379, 27017, 15432))),
                  db_service=values["db"].lower(), lines=str(rng.choice((200, 300, 400, 500))),
                  api=str(rng.randint(1, 3)), port2=str(rng.choice((3000, 5000, 8000, 8080))),
                  ci_minutes=str(rng.choice((15, 20, 30, 45))), rate=str(rng.choice((60, 100, 120, 600))))
    return values
