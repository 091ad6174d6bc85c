"""Every helper and fixture of the suite (tests/conftest.py registers the fixtures): a sandboxed
lemonpack home (``home``), the one recipe builder (``recipes``), children a test may interrupt
(``interrupt``), fake engines, real servers, registries, images and tools."""
