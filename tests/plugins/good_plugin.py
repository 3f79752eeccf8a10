"""A plugin module as a third-party package would ship it: importing it registers a guard check."""

from ragcost.guards.base import Finding, TextGuard, guard_registry


@guard_registry.register("entry-point-test-check", replace=True)
class EntryPointCheck(TextGuard):
    name = "entry-point-test-check"

    def scan(self, text: str) -> list[Finding]:
        return []
