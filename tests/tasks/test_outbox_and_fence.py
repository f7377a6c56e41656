"""The store's patience with a database that is away. (The Temporal engine's store-side pieces
that were tested here follow their modules: test_outbox, test_fence, test_lease.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from errand.database import StoreUnreachable
from errand.errors import ConfigError
from errand.tasks.store.tasks import TaskStore


def test_a_patient_store_waits_for_a_database_that_comes_back(tmp_path: Path) -> None:
    directory = tmp_path / "later"
    url = f"sqlite:///{directory / 'errand.db'}"  # its directory is missing: SQLite cannot open it yet
    store = TaskStore(sa.create_engine(url))
    with pytest.raises(StoreUnreachable) as away:  # an impatient store says so at once
        store.last_event_id()
    assert "could not be reached" in away.value.message and isinstance(away.value, sa.exc.SQLAlchemyError)

    async def later() -> None:  # the database appears whole, at once
        await asyncio.sleep(0.5)
        staging = tmp_path / "staging"
        staging.mkdir()
        TaskStore.open(f"sqlite:///{staging / 'errand.db'}").close()
        staging.rename(directory)

    async def main() -> int:
        appearing = asyncio.create_task(later())
        found = await asyncio.to_thread(store.patient(60).last_event_id)
        await appearing
        return found

    assert asyncio.run(main()) == 0


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_store_retry_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_STORE_RETRY_SECONDS", value)
    with pytest.raises(ConfigError) as refused:
        TaskStore.open("sqlite://").patient()
    assert refused.value.code == "bad_store_retry"
