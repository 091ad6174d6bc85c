"""The words of an ``extension.json`` manifest (seed 002 section 3): capabilities,
requirements, platforms and commands. Alone in a module with no imports so that the command
line can name them in its help (``lemonpack probe --help``) without loading the manifest
checker (jsonschema); :mod:`lemonpack.extensions.manifest` re-exports them."""

CAPABILITIES = ("text_generation", "embeddings", "speech_recognition", "speech_synthesis",
                "image_generation", "video_generation", "decisions")
REQUIREMENTS = ("hip", "cuda", "vulkan", "testing", "linux", "windows", "macos")
PLATFORMS = ("linux", "windows", "macos")
COMMANDS = ("serve", "bench", "prompt", "chat")
