"""Who may import whom (docs/architecture.md, "Packages"), read from the source's import
statements, lazy imports inside functions included:

- a service (gateway, ingest, retriever, re-ranker, memory) imports only ``lectern_common``
  (and the gateway, which answers, ``lectern_answerer``): its container needs no other
  service's code;
- ``lectern_common`` imports no other Lectern package; ``lectern_answerer`` (the offline
  answerer) imports ``lectern_common`` alone;
- the tools (``lectern_eval``, ``lectern_cli``) sit above and drive the system through its
  public contracts, starting services as processes (the supervisor), never importing them;
- ``lectern_testing`` (fixtures, fake servers) is imported by tests and benchmarks only;
- ``lectern_client`` (the Python client) imports no Lectern package: it is installed alone;
- no package has an import cycle between its own modules.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES: dict[str, Path] = {
    "lectern_common": REPO / "libs/common/src/lectern_common",
    "lectern_answerer": REPO / "libs/answerer/src/lectern_answerer",
    "lectern_eval": REPO / "libs/eval/src/lectern_eval",
    "lectern_cli": REPO / "libs/cli/src/lectern_cli",
    "lectern_testing": REPO / "libs/testing/src/lectern_testing",
    "lectern_client": REPO / "clients/python/src/lectern_client",
    "lectern_gateway": REPO / "services/chat-gateway/src/lectern_gateway",
    "lectern_ingest": REPO / "services/ingest/src/lectern_ingest",
    "lectern_retriever": REPO / "services/retriever/src/lectern_retriever",
    "lectern_reranker": REPO / "services/reranker/src/lectern_reranker",
    "lectern_memory": REPO / "services/memory/src/lectern_memory",
}
SERVICES = frozenset(
    {"lectern_gateway", "lectern_ingest", "lectern_retriever", "lectern_reranker",
     "lectern_memory"}
)  # fmt: skip
ALLOWED: dict[str, frozenset[str]] = {
    "lectern_common": frozenset(),
    "lectern_answerer": frozenset({"lectern_common"}),
    **{service: frozenset({"lectern_common"}) for service in SERVICES},
    "lectern_gateway": frozenset({"lectern_common", "lectern_answerer"}),
    "lectern_eval": frozenset({"lectern_common"}),
    "lectern_cli": frozenset({"lectern_common", "lectern_eval", "lectern_client"}),
    "lectern_client": frozenset(),
    "lectern_testing": frozenset({"lectern_common", *SERVICES}),
}
#: modules allowed more than their package, each with its reason (none today: keep it so)
EXCEPTIONS: dict[str, frozenset[str]] = {}


def modules(package: str) -> Iterator[tuple[str, Path]]:
    """(dotted module name, file) of every module of a package."""
    root = PACKAGES[package]
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imported(path: Path) -> set[str]:
    """Every absolute module an import statement of the file names (``from a import b``
    gives ``a`` and ``a.b``, since ``b`` may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_package_imports_only_what_its_layer_allows(package: str) -> None:
    wrong = []
    for name, path in modules(package):
        allowed = ALLOWED[package] | EXCEPTIONS.get(name, frozenset()) | {package}
        for target in imported(path):
            top = target.split(".")[0]
            if top in PACKAGES and top not in allowed:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_exceptions_are_still_needed() -> None:
    """An exception nobody uses any more is removed, so the rule can only get stricter."""
    for name, extra in EXCEPTIONS.items():
        package = name.split(".")[0]
        path = dict(modules(package))[name]
        used = {t.split(".")[0] for t in imported(path)}
        assert extra <= used, f"{name} no longer imports {sorted(extra - used)}"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle_between_a_packages_modules(package: str) -> None:
    names = dict(modules(package))
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in names.items():
        graph[name] = {t for t in imported(path) if t in names and t != name}
    cycles = _cycles(graph)
    assert not cycles, f"import cycles: {cycles}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# -- the shared library holds what several packages use (issue 61) ----------------------

#: the longest a module of ``lectern_common`` may be, in lines: one service's model of answers
#: (the offline answerer, 1,429 lines) or one tool's machinery (the embedded stack's
#: supervisor, 844) is a package of its own, not a corner of the shared library
MAX_COMMON_MODULE_LINES = 700


def test_the_shared_library_imports_neither_the_answerer_nor_the_cli() -> None:
    """``lectern_answerer`` and ``lectern_cli`` build on ``lectern_common``, never the
    reverse: no cycle between the packages, and no service's image needs the CLI."""
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in modules("lectern_common")
        for target in imported(path)
        if target.split(".")[0] in {"lectern_answerer", "lectern_cli"}
    )
    assert not wrong, "\n".join(wrong)


def test_no_module_of_the_shared_library_is_over_700_lines() -> None:
    long = sorted(
        f"{name} ({lines} lines)"
        for name, path in modules("lectern_common")
        if (lines := len(path.read_text().splitlines())) > MAX_COMMON_MODULE_LINES
    )
    assert not long, "move what one package uses into it, or split by what it does:\n" + (
        "\n".join(long)
    )


def test_the_answerer_imports_no_service() -> None:
    """The offline answerer is a library the gateway uses: its sources come to it as
    ``lectern_common.generation.SourceText``, and it knows no service's code."""
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in modules("lectern_answerer")
        for target in imported(path)
        if target.split(".")[0] in SERVICES
    )
    assert not wrong, "\n".join(wrong)


# -- the gateway's domains (docs/architecture.md, "The gateway's domains") --------------

GATEWAY = PACKAGES["lectern_gateway"]
#: folders of the gateway that are domains; its top-level modules (app, deps, runtime,
#: config, auth, problems) are the composition root and the shared HTTP plumbing
DOMAINS = frozenset(p.name for p in GATEWAY.iterdir() if (p / "__init__.py").exists())


def _domain(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in DOMAINS else None


def _domain_imports() -> Iterator[tuple[str, str, str]]:
    """(importing module, its domain, imported module) for every import of another domain."""
    for name, path in modules("lectern_gateway"):
        own = _domain(name)
        if own is None:
            continue
        for target in imported(path):
            other = _domain(target) if target.startswith("lectern_gateway.") else None
            if other is not None and other != own:
                yield name, own, target


def test_a_domain_calls_another_through_its_service_never_its_routes() -> None:
    """What chat asks of personas lives in ``personas.service``, not ``personas.routes``:
    a domain's routes are HTTP only."""
    wrong = sorted(
        f"{name} imports {target}"
        for name, _, target in _domain_imports()
        if target.split(".")[2] == "routes"
    )
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_the_gateways_domains() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for _, own, target in _domain_imports():
        other = _domain(target)
        assert other is not None
        graph[own].add(other)
    cycles = _cycles(graph)
    assert not cycles, f"domains importing each other: {cycles}"


def test_dependencies_are_typed_not_looked_up_by_name() -> None:
    """No ``resources: dict[str, Any]`` looked up by string key, and the gateway's
    dependencies (``GatewayDeps``, and ``ChatDeps`` for a turn) have no ``Any`` field (the
    pool is ``lectern_common.db.types.Pool``)."""
    looked_up = [
        f"{name}: {path.read_text().count('.resources')} uses of .resources"
        for package in SERVICES
        for name, path in modules(package)
        if ".resources[" in path.read_text() or ".resources.get(" in path.read_text()
    ]
    assert not looked_up, looked_up
    for module, cls in (("deps", "GatewayDeps"), ("chat/turn_input", "ChatDeps")):
        tree = ast.parse((GATEWAY / f"{module}.py").read_text())
        found = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
        untyped = [
            node.target.id
            for node in found.body
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and "Any" in ast.unparse(node.annotation)
        ]
        assert not untyped, f"{cls} fields typed Any: {untyped}"


#: the longest a function of the product code (services/ and libs/) may be, in lines: a
#: longer one is split into named steps (issue 48)
MAX_FUNCTION_LINES = 80


def function_lengths() -> Iterator[tuple[str, int]]:
    """("path:function", lines) of every function and method in services/ and libs/."""
    for top in ("services", "libs"):
        for path in sorted((REPO / top).rglob("*.py")):
            if ".egg-info" in str(path):
                continue
            where = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    yield f"{where}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_eighty_lines() -> None:
    long = [
        f"{name} ({lines} lines)"
        for name, lines in function_lengths()
        if lines > MAX_FUNCTION_LINES
    ]
    assert not long, "split into named steps:\n" + "\n".join(sorted(long))


# -- each service owns its data (docs/architecture.md, "Who owns which data") ------------

#: tables only the memory service reads or writes; the gateway asks it (lectern.memory.*)
MEMORY_TABLES = ("user_memories", "memory_turn_signals", "memory_distillations",
                 "memory_quiz_topics", "memory_quiz_attempts", "memory_flags",
                 "memory_erasures", "memory_check_runs")  # fmt: skip
#: every table the memory service's SQL may name: its own (``memory_erasures``: the erasures it
#: applied), and the shared ``outbox`` where it keeps its ``memory.distilled`` events. It learns
#: flags from ``feedback.flagged`` (``memory_flags``), not the gateway's ``feedback_flags``
MEMORY_SQL_TABLES = frozenset({*MEMORY_TABLES, "outbox"})
MIGRATIONS = REPO / "libs/common/src/lectern_common/db/migrations"
#: a statement writing ingest's tables (``chunks``, the BM25 statistics) or calling its BM25
#: maintenance functions: the gateway does neither, it announces a teacher's change through its
#: outbox and ingest applies it (``lectern_ingest.lifecycle``)
_INGEST_WRITE = re.compile(
    r"\b(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+(chunks|bm25_\w+)\b|\blectern_bm25_\w+\s*\(",
    re.IGNORECASE,
)


#: a statement reading ingest's tables: the retriever answers those reads
#: (``lectern.retrieve.v1``, ``lectern.index.*``)
_INDEX_READ = re.compile(r"\b(FROM|JOIN)\s+(chunks|bm25_\w+)\b|,\s*chunks\s+c\b", re.IGNORECASE)


def _strings(path: Path) -> Iterator[str]:
    """The string literals of a module (its SQL), docstrings and comments aside."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def _code_strings(path: Path) -> Iterator[str]:
    """The string literals of a module but its docstrings (an f-string's literal parts
    included)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        ast.get_docstring(n, clean=False)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    }
    yield from (text for text in _strings(path) if text not in docstrings)


def test_the_gateway_reaches_other_services_data_through_them() -> None:
    """No SQL of the gateway names a memory table, writes ingest's tables (``chunks``, the
    BM25 statistics) or reads them: the retriever answers those reads."""
    wrong = []
    for name, path in modules("lectern_gateway"):
        for text in _code_strings(path):
            wrong += [f"{name} reads {t}" for t in MEMORY_TABLES if re.search(rf"\b{t}\b", text)]
            if _INGEST_WRITE.search(text):
                wrong.append(f"{name} writes ingest's tables: {text.strip()[:80]!r}")
            elif _INDEX_READ.search(text):
                wrong.append(f"{name} reads the index, not through the retriever")
    assert not wrong, "\n".join(wrong)


#: a statement writing ingest's tables: ``chunks`` and the BM25 statistics (``bm25_*``)
_WRITES_INDEX = re.compile(
    r"\b(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+(chunks|bm25_\w+)\b", re.IGNORECASE
)
MIGRATIONS = REPO / "libs/common/src/lectern_common/db/migrations"
#: a function of the migrations, its name and its body (every one is quoted ``$$ ... $$``)
_FUNCTION = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(lectern_\w+)\s*\(.*?\$\$(.*?)\$\$",
    re.IGNORECASE | re.DOTALL,
)


def writing_functions() -> frozenset[str]:
    """The functions of the migrations (``lectern_bm25_*`` and any other ``lectern_*``) that
    write ``chunks`` or the BM25 tables, themselves or through another such function (any
    definition of one that did, a later ``CREATE OR REPLACE`` included): calling one writes
    ingest's rows."""
    bodies: dict[str, str] = defaultdict(str)
    for path in sorted(MIGRATIONS.glob("*.sql")):
        for match in _FUNCTION.finditer(path.read_text()):
            bodies[match[1].lower()] += match[2]
    writing = {name for name, body in bodies.items() if _WRITES_INDEX.search(body)}
    while True:
        calling = {
            name
            for name, body in bodies.items()
            if any(re.search(rf"\b{callee}\s*\(", body, re.IGNORECASE) for callee in writing)
        }
        if calling <= writing:
            return frozenset(writing)
        writing |= calling


#: every service's package, found on disk (``services/*/src``), so a new one is checked too
SERVICE_PACKAGES = sorted(path.parent for path in REPO.glob("services/*/src/*/__init__.py"))


def test_only_ingest_writes_the_index() -> None:
    """No SQL of a service other than ingest writes ``chunks`` or the BM25 tables or calls a
    function of the migrations that does (``lectern_bm25_reweight``, ``..._index_document``
    ...): ingest owns them (issue 61). Read-only functions (``lectern_bm25_stale_tenants``,
    ``lectern_bm25_k1`` ...) may be called by readers. No allow-list."""
    writing = writing_functions()
    # the scan sees the functions and the services it is about
    assert {"lectern_bm25_reweight", "lectern_bm25_index_document"} <= writing
    assert not {"lectern_bm25_stale_tenants", "lectern_live_embedding_model"} & writing
    assert {package.name for package in SERVICE_PACKAGES} >= SERVICES
    calls = re.compile(rf"\b({'|'.join(sorted(writing))})\s*\(", re.IGNORECASE)
    wrong = [
        f"{path.relative_to(REPO)}: {text.strip()[:80]!r}"
        for package in SERVICE_PACKAGES
        if package.name != "lectern_ingest"
        for path in sorted(package.rglob("*.py"))
        for text in _code_strings(path)
        if _WRITES_INDEX.search(text) or calls.search(text)
    ]
    assert not wrong, "only ingest writes chunks and the BM25 tables:\n" + "\n".join(wrong)


#: a statement's opening words, as the gateway writes them (upper case)
_SQL = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+(\s+\w+)?\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\b)"
)


def _sql_outside_repositories() -> set[str]:
    """Gateway modules other than a ``repository`` with a string literal opening a SQL
    statement (an f-string's literal parts included)."""
    found = set()
    for name, path in modules("lectern_gateway"):
        if name.rsplit(".", 1)[-1] == "repository":
            continue
        if any(_SQL.match(text) for text in _strings(path)):
            found.add(name)
    return found


def test_the_gateways_sql_lives_in_its_repositories() -> None:
    """Routes and services call a domain's ``repository`` functions; they write no SQL."""
    found = _sql_outside_repositories()
    assert not found, f"SQL outside a repository.py: {sorted(found)}"


def _tables() -> set[str]:
    """Every table the migrations create."""
    return {
        name
        for path in MIGRATIONS.glob("*.sql")
        for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text())
    }


def test_the_memory_services_sql_names_only_its_own_tables() -> None:
    """No string of the memory service names another service's table (a table name in a
    ``DELETE FROM {table}`` loop counts too): it learns what the gateway knows from events."""
    tables = _tables()
    assert not MEMORY_SQL_TABLES - tables, "a table no migration creates"
    wrong = set()
    for name, path in modules("lectern_memory"):
        for text in _code_strings(path):
            # a whole identifier: "lectern-memory-quizzes", a durable, names no table
            named = {t for t in tables if re.search(rf"(?<![\w.-]){t}(?![\w-])", text)}
            wrong |= {f"{name} names {t}" for t in named - MEMORY_SQL_TABLES}
    assert not wrong, "\n".join(sorted(wrong))


#: what a package holding a database connection imports
_DATABASE_MODULES = ("asyncpg", "lectern_common.db")


def _database_use(package: str) -> list[str]:
    """What of ``package`` reaches Postgres: a module importing the driver or the shared
    pool, a string literal opening a SQL statement or reading the index's tables."""
    found = []
    for name, path in modules(package):
        found += [
            f"{name} imports {module}"
            for module in sorted(imported(path))
            if any(module == m or module.startswith(f"{m}.") for m in _DATABASE_MODULES)
        ]
        found += [
            f"{name} holds SQL: {text.strip()[:60]!r}"
            for text in _strings(path)
            if _SQL.match(text) or _INDEX_READ.search(text)
        ]
    return found


def test_the_reranker_has_no_database() -> None:
    """The re-ranker's reads of the index (the model it was built with, the candidates'
    stored vectors) are the retriever's (``lectern.index.vectors.v1``): it has no SQL and no
    pool."""
    found = _database_use("lectern_reranker")
    assert not found, "\n".join(found)


def test_sql_added_to_the_reranker_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above sees a statement and a pool, were one added back."""
    copy = tmp_path / "lectern_reranker"
    copy.mkdir()
    for _, path in modules("lectern_reranker"):
        target = copy / path.relative_to(PACKAGES["lectern_reranker"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    (copy / "repository.py").write_text(
        "from lectern_common.db.types import Queryable\n\n\n"
        "async def index_model(pool: Queryable) -> object:\n"
        '    return await pool.fetchrow("SELECT name FROM embedding_models WHERE id = 1")\n'
    )
    monkeypatch.setitem(PACKAGES, "lectern_reranker", copy)
    found = _database_use("lectern_reranker")
    assert found == [
        "lectern_reranker.repository imports lectern_common.db.types",
        "lectern_reranker.repository imports lectern_common.db.types.Queryable",
        "lectern_reranker.repository holds SQL: 'SELECT name FROM embedding_models WHERE id = 1'",
    ]


#: which service owns each table (docs/architecture.md, "Who owns which data"): only its owner
#: has SQL naming it, except the reads in ``INDEX_READERS``
OWNERS: dict[str, frozenset[str]] = {
    "lectern_ingest": frozenset({
        "chunks", "bm25_collection_stats", "bm25_term_stats", "bm25_vocabulary",
        "index_documents", "embedding_models", "index_builds", "ingest_documents",
    }),
    "lectern_retriever": frozenset({"tenant_indexes"}),
    "lectern_memory": frozenset({
        "user_memories", "memory_turn_signals", "memory_distillations", "memory_quiz_topics",
        "memory_quiz_attempts", "memory_erasures", "memory_flags", "memory_check_runs",
    }),
    "lectern_gateway": frozenset({
        "documents", "document_audit", "chat_sessions", "chat_messages", "chat_turns",
        "api_keys", "erased_users", "class_members", "curriculum_standards", "feedback_flags",
        "freshness_horizons", "gap_closures", "knowledge_gaps", "personas", "quality_citations",
        "quality_daily", "quality_gap_topics", "quiz_attempts", "quizzes", "student_notices",
        "tenant_settings", "usage_counters", "webhook_attempts", "webhook_deliveries",
        "webhooks", "source_conflicts", "lti_contexts", "lti_deep_links", "lti_deployments",
        "lti_grade_links", "lti_oidc_states", "lti_registrations", "lti_resource_links",
        "lti_roster_members", "lti_score_outbox", "lti_tool_keys", "lti_users",
    }),
    "lectern_reranker": frozenset(),
}  # fmt: skip
#: the index ingest writes is read by the retriever, which answers every other service's
#: reads of it (``lectern.retrieve.v1``, ``lectern.index.*``); it builds read indexes on it
INDEX_READERS = {
    "lectern_retriever": OWNERS["lectern_ingest"] - {"index_builds", "ingest_documents"}
}
#: every service writes its own events' rows through ``lectern_common.outbox``
SHARED_TABLES = frozenset({"outbox"})
_TABLE_REF = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE|ON)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)\b", re.IGNORECASE
)


def _tables_named(package: str) -> dict[str, set[str]]:
    """Every known table a package's SQL names (docstrings aside): table -> its modules."""
    known = set().union(*OWNERS.values(), SHARED_TABLES)
    found: dict[str, set[str]] = defaultdict(set)
    for name, path in modules(package):
        tree = ast.parse(path.read_text())
        docstrings = {
            ast.get_docstring(n, clean=False)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for text in _strings(path):
            if text in docstrings:
                continue
            for table in _TABLE_REF.findall(text):
                if table.lower() in known:
                    found[table.lower()].add(name)
    return found


@pytest.mark.parametrize("service", sorted(OWNERS))
def test_a_service_has_sql_only_on_its_own_tables(service: str) -> None:
    """No service's SQL names another service's table (the retriever reads ingest's index);
    each table in the migrations has one owner."""
    allowed = OWNERS[service] | INDEX_READERS.get(service, frozenset()) | SHARED_TABLES
    wrong = {
        f"{table} ({', '.join(sorted(where))})"
        for table, where in _tables_named(service).items()
        if table not in allowed
    }
    assert not wrong, f"{service} has SQL on other services' tables: {sorted(wrong)}"


def test_every_table_of_the_migrations_has_one_owner() -> None:
    """A new table is given an owner here (and in docs/architecture.md) when it is made."""
    migrations = REPO / "libs/common/src/lectern_common/db/migrations"
    created = set()
    for path in migrations.glob("*.sql"):
        created |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text()))
        created -= set(re.findall(r"DROP TABLE (?:IF EXISTS )?(\w+)", path.read_text()))
    owned = [t for tables in OWNERS.values() for t in tables]
    assert len(owned) == len(set(owned)), "a table with two owners"
    assert created - SHARED_TABLES == set(owned), created ^ set(owned)


#: each service's app module, as its process imports it at start-up
SERVICE_APPS = [
    "lectern_ingest.app", "lectern_retriever.app", "lectern_reranker.app",
    "lectern_memory.app", "lectern_gateway.app", "lectern_ingest.structure",
]  # fmt: skip


def test_a_service_starts_without_importing_google_genai() -> None:
    """google-genai is imported where Gemini is called, never at start-up: the offline default
    never calls it, and its import cost each service ~0.6 s of CPU and ~16 MB."""
    import subprocess
    import sys

    script = (
        "import importlib, sys\n"
        f"for name in {SERVICE_APPS!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.genai')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
