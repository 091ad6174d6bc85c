"""The catalogue: official and community recipes and extensions, verified into
a signed, byte-reproducible index, searched from the CLI and browsed as a static site.

- :mod:`.sources`: publisher / entry TOML files, their JSON Schemas (``schema/``), ``lint``.
- :mod:`.build`: ``catalogue build``: fetch, verify, describe, write, sign; :mod:`.output`: its
  output files (entries encoded once, the previous output's unchanged files linked).
- :mod:`.search`: the search semantics shared with the site; :mod:`.fits`: "runs on this host".
- :mod:`.index`: reading, verifying and updating a built index (local or cached).
- :mod:`.site`: the static site (``render_site(index, out)``); :mod:`.feed`: ``feed.atom``.
- :mod:`.fetching`: an entry's source fetched and checked (``catalogue fetch`` too);
  :mod:`.bounded`: the limits on community input; :mod:`.signatures`: signature status;
  :mod:`.commands`: the commands shown; :mod:`.signing`: ``catalogue sign``.
- :mod:`.official`: the shipped index of official entries; :mod:`.dates`: the build date;
  :mod:`.history`: each entry's versions with dates, carried from the previous index;
  :mod:`.memo`: what a warm build reuses.
- :mod:`.facts`: an entry's platforms and pinning; :mod:`.archs`: GPU arch tables and arch
  patterns; :mod:`.names`: names and checks the build and the readers share.
- :mod:`.models`: model entries (a model artifact by digest: its facts, memory estimate, the
  recipes that serve it, its fit in the host's memory budget).
"""
