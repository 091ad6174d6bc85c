"""Downloads with progress, streaming sha256 verification, mirrors, a content-addressed
cache and safe archive extraction."""

from lemonpack.fetch.archive import detect_format, extract
from lemonpack.fetch.cache import ArtifactCache, default_cache_root
from lemonpack.fetch.download import Fetched, fetch
from lemonpack.fetch.mirror import Mirror, mirror_path

__all__ = ["ArtifactCache", "default_cache_root", "Fetched", "fetch", "Mirror", "mirror_path",
           "extract", "detect_format"]
