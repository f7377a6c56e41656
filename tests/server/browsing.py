"""A person in a real browser (Debian's Chromium, driven by Playwright): pages at 1280 and
390 px that record what goes wrong in them and photograph what they show."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import playwright.sync_api as playwright

CHROMIUM = Path("/usr/bin/chromium")
WIDE, NARROW = {"width": 1280, "height": 900}, {"width": 390, "height": 844}


class Person:
    """A browser page that records what goes wrong in it and photographs what it sees."""

    def __init__(self, browser: playwright.Browser, base: str, artifacts: Path) -> None:
        self.base = base
        self.artifacts = artifacts
        self.page = browser.new_page(viewport=WIDE)
        self.narrow = browser.new_page(viewport=NARROW)
        self.errors: list[str] = []
        for page in (self.page, self.narrow):
            page.on("console", lambda message, page=page: self._console(page, message))
            page.on("pageerror", lambda error: self.errors.append(str(error)))

    def _console(self, page: playwright.Page, message: playwright.ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{'wide' if page is self.page else 'narrow'} {page.url}: {message.text} "
                               f"({message.location.get('url')})")

    def shoot(self, name: str) -> None:
        self.page.screenshot(path=str(self.artifacts / f"{name}-1280.png"), full_page=True)
        self.narrow.goto(self.page.url)
        self.narrow.wait_for_load_state("networkidle")
        self.narrow.screenshot(path=str(self.artifacts / f"{name}-390.png"), full_page=True)
        width = self.narrow.evaluate("document.documentElement.scrollWidth")
        assert width <= NARROW["width"], f"{name} scrolls sideways at 390 px ({width} px wide)"
