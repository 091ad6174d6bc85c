"""The catalogue site in Debian's headless Chromium, opened from file:// with the network off.

Covers issue 10's proof list: search narrows the list, each facet filters, an entry page shows
its digests and commands, a shared fragment restores the filters, a host-facts file marks
fits, a hostile community description runs nothing (page flag ``window.__pwned``), the shared
query table gives the expected ids in the page, the page is readable with JavaScript off and
requests nothing but local files. Screenshots go to ``$LEMONPACK_TEST_ARTIFACTS/catalogue-site``
(or the test's temporary directory).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from support.catalogue_site import QUERIES, hostile_index, reference_search
from support.browser import artifacts_dir, chromium

from lemonpack.catalogue.site import FACETS, entry_facets, entry_slug, render_site

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site of the fixture index plus one hostile community entry: (index, out dir)."""
    out = tmp_path_factory.mktemp("catalogue-site")
    index = hostile_index()
    render_site(index, out)
    return index, out


@pytest.fixture(scope="module")
def browser():
    with chromium(offline=True) as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return artifacts_dir("catalogue-site", tmp_path_factory.mktemp("artifacts"))


def open_index(driver, out, fragment: str = ""):
    driver.get("about:blank")
    driver.get((out / "index.html").as_uri() + fragment)
    wait_ready(driver)


def wait_ready(driver):
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "true")


def visible_ids(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#entries > li'))"
        ".filter(li => !li.hidden && li.offsetParent !== null).map(li => li.dataset.id)")


def fragment(query: str, filters: dict, sort: str = "relevance") -> str:
    pairs = [("q", query)] if query.strip() else []
    for key, _ in FACETS:
        if key in filters:
            vals = filters[key] if isinstance(filters[key], list) else [filters[key]]
            pairs += [(key, ("true" if v else "false") if isinstance(v, bool) else v) for v in vals]
    if sort != "relevance":
        pairs.append(("sort", sort))
    return "#" + urlencode(pairs) if pairs else ""


def pwned(driver) -> str:
    return driver.execute_script("return typeof window.__pwned")


def test_search_box_narrows_the_list_and_writes_the_fragment(browser, site, shots):
    index, out = site
    open_index(browser, out)
    everything = [e["id"] for e in index["entries"]]
    assert visible_ids(browser) == everything
    box = browser.find_element("id", "q")
    box.send_keys("whisper")
    assert visible_ids(browser) == ["recipe:beta-whisper-cuda"]
    assert browser.find_element("id", "summary").text == f"1 of {len(everything)} entries"
    assert browser.execute_script("return location.hash") == "#q=whisper"
    box.clear()
    box.send_keys("  ACME   strix ")
    assert visible_ids(browser) == ["recipe:acme-strix-toolbox"]
    box.clear()
    box.send_keys("no-such-thing-anywhere")
    assert visible_ids(browser) == []
    assert browser.find_element("id", "empty").is_displayed()
    browser.save_screenshot(str(shots / "search-no-match.png"))
    box.clear()
    box.send_keys("llama")
    browser.save_screenshot(str(shots / "search-llama.png"))
    assert visible_ids(browser) == reference_search(index, "llama", {})


def test_each_facet_filters(browser, site, shots):
    index, out = site
    for key, _ in FACETS:
        open_index(browser, out)
        boxes = browser.find_elements("css selector", f'input[type=checkbox][name="{key}"]')
        assert boxes, key
        values = [b.get_attribute("value") for b in boxes]
        assert values == sorted({v for e in index["entries"] for v in entry_facets(e)[key]},
                                key=(lambda v: v != "true") if key == "official" else None), key
        # One value, then a second one of the same facet (any of).
        boxes[0].click()
        expected = reference_search(index, "", {key: values[0]})
        assert expected and visible_ids(browser) == expected, (key, values[0])
        assert visible_ids(browser) == reference_search(index, "", {key: values[0]})
        if len(boxes) > 1:
            boxes[-1].click()
            assert visible_ids(browser) == reference_search(index, "", {key: [values[0], values[-1]]}), key
        browser.save_screenshot(str(shots / f"facet-{key}.png"))
        browser.find_element("id", "clear").click()
        assert visible_ids(browser) == [e["id"] for e in index["entries"]]
        assert browser.execute_script("return location.hash") == ""


def test_shared_fragment_restores_the_filters(browser, site, shots):
    index, out = site
    frag = "#q=acme&kind=recipe&os=linux&os=windows&official=false"
    open_index(browser, out, frag)
    assert browser.find_element("id", "q").get_attribute("value") == "acme"
    checked = browser.execute_script(
        "return Array.from(document.querySelectorAll('#filters input[type=checkbox]:checked'))"
        ".map(c => c.name + '=' + c.value)")
    assert checked == ["kind=recipe", "os=linux", "os=windows", "official=false"]
    expected = reference_search(index, "acme", {"kind": "recipe", "os": ["linux", "windows"], "official": False})
    assert expected == ["recipe:acme-strix-toolbox"]
    assert visible_ids(browser) == expected
    browser.save_screenshot(str(shots / "shared-fragment.png"))
    # The fragment the page writes for that state restores the same view in a fresh load.
    written = browser.execute_script("return location.hash")
    open_index(browser, out, written)
    assert visible_ids(browser) == expected
    # A changed fragment (back/forward, pasted link) is followed without a reload.
    browser.execute_script("location.hash = 'kind=extension'")
    assert visible_ids(browser) == reference_search(index, "", {"kind": "extension"})


def test_shared_query_table_in_the_page(browser, site):
    index, out = site
    table = json.loads(QUERIES.read_text())
    assert len(table) >= 20
    # The shared table is written against the fixture index: run it on a site of that index.
    from support.catalogue_site import load_fixture
    fixture = load_fixture()
    sub = out.parent / (out.name + "-fixture")
    render_site(fixture, sub)
    open_index(browser, sub)
    for row in table:
        got = browser.execute_script(
            "const api = window.lemonpackCatalogue, r = api.searchReport(arguments[0], arguments[1]);"
            "return {ids: api.sortIds(r.ids, arguments[2]), corrected: r.corrected};",
            row["query"], row["filters"], row.get("sort", "relevance"))
        assert got["ids"] == row["expected_ids"], row
        assert got["corrected"] == row.get("corrected", {}), row
    # And through the user interface: the fragment sets the form, the list shows the result.
    for row in table:
        browser.execute_script("location.hash = arguments[0]", fragment(row["query"], row["filters"], row.get("sort", "relevance")) or "#")
        assert visible_ids(browser) == row["expected_ids"], row


def test_entry_page_shows_digests_and_commands(browser, site, shots):
    index, out = site
    open_index(browser, out)
    browser.find_element("link text", "Strix toolbox llama.cpp").click()
    e = next(x for x in index["entries"] if x["id"] == "recipe:acme-strix-toolbox")
    assert browser.current_url.endswith(f"/entry/{entry_slug(e['id'])}.html")
    digest = browser.find_element("css selector", "code[data-digest=entry]").text
    assert digest == e["digest"]
    commands = {c.get_attribute("data-command"): c.text
                for c in browser.find_elements("css selector", "code.command:not([data-platform])")}
    assert commands == e["commands"]
    # rocm + cpu on linux: each platform's install names it, as install selects it there (case 77)
    per_platform = {c.get_attribute("data-platform"): c.text
                    for c in browser.find_elements("css selector", "code.command[data-platform]")}
    from lemonpack.catalogue.fits import platform_installs
    assert per_platform == platform_installs(e) and per_platform["linux/cpu"].endswith(" --accelerator cpu")
    assert browser.find_element("css selector", "code.fingerprint").text == e["signature"]["fingerprint"]
    body = browser.find_element("tag name", "body").text
    assert "signed by an unknown key" in body and "gfx1151" in body
    browser.save_screenshot(str(shots / "entry-page.png"))


def load_host(driver, tmp_path, facts: dict) -> None:
    from selenium.webdriver.support.ui import WebDriverWait
    path = tmp_path / f"host-{abs(hash(json.dumps(facts, sort_keys=True)))}.json"
    path.write_text(json.dumps(facts))
    driver.execute_script("document.body.removeAttribute('data-host-loaded')")
    driver.find_element("id", "hostfile").send_keys(str(path))
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-host-loaded')") is not None)


def fit_marks(driver) -> dict[str, tuple[str, str]]:
    return dict(driver.execute_script(
        "return Array.from(document.querySelectorAll('#entries > li')).map(li => [li.dataset.id, "
        "[li.classList.contains('fits') ? 'fits' : li.classList.contains('no-fit') ? 'no-fit' : '', "
        "li.querySelector('.fit').textContent]])"))


def test_host_facts_file_marks_fits(browser, site, shots, tmp_path):
    index, out = site
    open_index(browser, out)
    load_host(browser, tmp_path, {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": "gfx1151",
                                  "cuda_arch": None})
    marks = fit_marks(browser)
    assert {k: v[0] for k, v in marks.items()} == {
        "extension:qwen": "fits", "recipe:hello-engine": "fits", "extension:acme_moe": "no-fit",
        "recipe:acme-strix-toolbox": "fits", "recipe:beta-whisper-cuda": "no-fit",
        "recipe:beta-metal-embed": "no-fit", "recipe:evil-engine": "no-fit", "recipe:gamma-kokoro": "no-fit",
        "recipe:gamma-rocm-tuned": "fits"}
    assert "linux/rocm" in marks["recipe:acme-strix-toolbox"][1]  # the GPU block, not the cpu fallback
    # rocm + cpu blocks: the page names the install arguments install needs there (case 77)
    assert marks["recipe:gamma-rocm-tuned"][1] == \
        "Runs on this host: linux/rocm gfx1151 (install with --accelerator rocm --arch gfx1151)"
    assert "needs vulkan on linux; the host has cpu, rocm" in marks["extension:acme_moe"][1]
    assert "no platform for linux" in marks["recipe:beta-metal-embed"][1]
    assert "4 of 9 entries fit" in browser.find_element("id", "host-status").text
    browser.find_element("id", "only-fits").click()
    assert visible_ids(browser) == ["extension:qwen", "recipe:hello-engine", "recipe:acme-strix-toolbox",
                                    "recipe:gamma-rocm-tuned"]
    # the generic rocm build runs on another arch too, as install selects it (case 76)
    load_host(browser, tmp_path, {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": "gfx1100"})
    assert fit_marks(browser)["recipe:gamma-rocm-tuned"] == [
        "fits", "Runs on this host: linux/rocm (install with --accelerator rocm)"]
    load_host(browser, tmp_path, {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": "gfx1151"})
    assert "fits=1" in browser.execute_script("return location.hash")
    browser.save_screenshot(str(shots / "host-rocm-gfx1151.png"))
    browser.find_element("id", "only-fits").click()  # every entry again: the list holds only what it shows
    # The GPU arch decides: an NVIDIA host whose arch the recipe does not list, then one it does.
    load_host(browser, tmp_path, {"os": "linux", "accelerators": ["cpu", "cuda"], "cuda_arch": "sm_86"})
    m = fit_marks(browser)["recipe:beta-whisper-cuda"]
    assert m[0] == "no-fit" and "linux/cuda is built for sm_89, sm_90; the host's GPU is sm_86" in m[1]
    load_host(browser, tmp_path, {"os": "linux", "accelerators": ["cuda"], "cuda_arch": "sm_90"})
    assert fit_marks(browser)["recipe:beta-whisper-cuda"][0] == "fits"
    browser.save_screenshot(str(shots / "host-cuda-sm90.png"))
    # A file that is not host facts is refused with a message, the marks stay as they were.
    load_host(browser, tmp_path, {"os": "plan9"})
    assert browser.execute_script("return document.body.getAttribute('data-host-loaded')") == "error"
    assert '"os" must be one of' in browser.find_element("id", "host-status").text


def test_hostile_description_runs_nothing(browser, site, shots):
    from selenium.webdriver.common.action_chains import ActionChains
    index, out = site
    open_index(browser, out, "#q=evil")
    assert visible_ids(browser) == ["recipe:evil-engine"]
    assert pwned(browser) == "undefined"
    browser.save_screenshot(str(shots / "hostile-index.png"))
    page = out / "entry" / f"{entry_slug('recipe:evil-engine')}.html"
    browser.get(page.as_uri())
    assert pwned(browser) == "undefined"
    # Hover over and click everything in the description that could carry a handler or a link.
    desc = browser.find_element("css selector", ".markdown")
    for el in desc.find_elements("css selector", "*"):
        if el.is_displayed():
            ActionChains(browser).move_to_element(el).perform()
    assert pwned(browser) == "undefined"
    hrefs = [a.get_attribute("href") for a in desc.find_elements("tag name", "a")]
    assert hrefs and all(h is None or h.startswith(("https://", "http://", "file://")) for h in hrefs), hrefs
    assert "<script>window.__pwned=1</script>" in desc.text  # shown as text
    browser.save_screenshot(str(shots / "hostile-entry.png"))
    for a in desc.find_elements("tag name", "a"):
        if a.get_attribute("href") is None:
            a.click()  # an inert anchor: nothing happens
    assert pwned(browser) == "undefined"


def test_readable_without_javascript(site, shots):
    index, out = site
    with chromium(offline=True, javascript=False) as driver:
        driver.get((out / "index.html").as_uri() + "#kind=extension")
        items = driver.find_elements("css selector", "#entries > li")
        assert [li.get_attribute("data-id") for li in items if li.is_displayed()] == [e["id"] for e in index["entries"]]
        assert "JavaScript is off" in driver.find_element("tag name", "body").text
        driver.save_screenshot(str(shots / "no-javascript.png"))
        driver.find_element("link text", "qwen").click()
        assert index["entries"][0]["digest"] in driver.find_element("tag name", "body").text


def test_nothing_but_local_files_is_requested(site):
    index, out = site
    with chromium(offline=True, performance_log=True) as driver:
        driver.get((out / "index.html").as_uri())
        wait_ready(driver)
        driver.get((out / "entry" / f"{entry_slug('recipe:evil-engine')}.html").as_uri())
        urls = []
        for row in driver.get_log("performance"):
            msg = json.loads(row["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        assert urls, "the performance log recorded no requests at all"
        assert all(u.startswith("file://") for u in urls), [u for u in urls if not u.startswith("file://")]
        assert any(u.endswith("/assets/catalogue-data.js") for u in urls)


HOSTS = [
    {"os": "linux", "accelerators": ["cpu"], "rocm_arch": None, "cuda_arch": None},
    {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": "gfx1151", "cuda_arch": None},
    {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": "gfx1100", "cuda_arch": None},
    {"os": "linux", "accelerators": ["cpu", "rocm"], "rocm_arch": None, "cuda_arch": None},
    {"os": "linux", "accelerators": ["cpu", "cuda", "vulkan"], "rocm_arch": None, "cuda_arch": "sm_89"},
    {"os": "linux", "accelerators": ["cpu", "vulkan"], "rocm_arch": "gfx1151", "cuda_arch": None},
    {"os": "windows", "accelerators": ["cpu", "vulkan"], "rocm_arch": None, "cuda_arch": "sm_90"},
    {"os": "darwin", "accelerators": ["cpu", "metal"], "rocm_arch": None, "cuda_arch": None},
    {"os": "darwin", "accelerators": ["cpu"], "rocm_arch": None, "cuda_arch": None},
]


def test_page_fit_agrees_with_the_cli_rule(browser, site):
    """The page's fit (JavaScript) against lemonpack.catalogue.fits.fits_host (what
    `catalogue search --fits-host` uses) for every entry on a range of hosts, verdict and words."""
    from lemonpack.catalogue.fits import host_fit
    from lemonpack.contract.host import HostFacts

    index, out = site
    open_index(browser, out)
    entries = index["entries"] + [dict(index["entries"][3], id="recipe:default-cpu", default_accelerator="cpu")]
    for host in HOSTS:
        got = browser.execute_script(
            "const api = window.lemonpackCatalogue, h = api.parseHost(arguments[1]);"
            "return arguments[0].map(e => { const r = api.fit(e, h); return [r.fits, r.reason, r.installArgs]; });",
            entries, host)
        want = [[f.fits, f.reason, list(f.install_args)] for f in (host_fit(e, HostFacts.from_json(host)) for e in entries)]
        assert got == want, host


# ---- presentation (issue 28 point 5): first screen, dark mode, skip link, sort, copy ---------

def _emulate(driver, width: int, height: int, dark: bool) -> None:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


def _reset_emulation(driver) -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


@pytest.mark.parametrize("width,height", [(1280, 900), (390, 844)])
@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_first_screen_light_and_dark(browser, site, shots, width, height, dark):
    """Screenshots of the first screen (test-artifacts/catalogue-site/first-screen-*.png); at
    390 px the first result is on the first screen, facets folded above it; dark mode follows
    prefers-color-scheme."""
    _, out = site
    try:
        _emulate(browser, width, height, dark)
        open_index(browser, out)
        geo = browser.execute_script(
            "const li = document.querySelector('#entries > li:not([hidden])'), r = li.getBoundingClientRect();"
            "const h = li.querySelector('h2').getBoundingClientRect();"
            "return {top: r.top, headBottom: h.bottom, inner: innerHeight, scrollY: scrollY, width: innerWidth,"
            " open: document.getElementById('facet-panel').open,"
            " bg: getComputedStyle(document.body).backgroundColor};")
        assert geo["width"] == width and geo["scrollY"] == 0
        assert 0 <= geo["top"] and geo["headBottom"] <= geo["inner"], geo  # visible without scrolling
        assert geo["open"] is (width > 760), geo  # narrow: the facets are one folded line
        assert (geo["bg"] == "rgb(21, 23, 26)") is dark, geo
        browser.save_screenshot(str(shots / f"first-screen-{width}-{'dark' if dark else 'light'}.png"))
    finally:
        _reset_emulation(browser)


def test_skip_link_is_the_first_stop_and_jumps_to_the_results(browser, site):
    from selenium.webdriver.common.keys import Keys

    _, out = site
    open_index(browser, out)
    browser.find_element("tag name", "body").send_keys(Keys.TAB)
    first = browser.switch_to.active_element
    assert first.get_attribute("class") == "skip" and first.text == "Skip to results"
    first.send_keys(Keys.ENTER)
    assert browser.execute_script("return document.activeElement.id") == "results"
    browser.switch_to.active_element.send_keys(Keys.TAB)  # the next stop is the first result's link
    assert browser.execute_script("return document.activeElement.closest('#entries > li').dataset.id") == \
        visible_ids(browser)[0]


def test_sort_select_orders_and_lives_in_the_fragment(browser, site):
    from selenium.webdriver.support.ui import Select

    index, out = site
    open_index(browser, out)
    Select(browser.find_element("id", "sort")).select_by_value("updated")
    from lemonpack.catalogue.search import sort_entries
    assert visible_ids(browser) == [e["id"] for e in sort_entries(index["entries"], "updated")]
    assert "sort=updated" in browser.execute_script("return location.hash")
    open_index(browser, out, "#sort=name")
    assert browser.find_element("id", "sort").get_attribute("value") == "name"
    assert visible_ids(browser) == [e["id"] for e in sort_entries(index["entries"], "name")]


def test_copy_buttons_copy_the_command_shown(browser, site, shots):
    index, out = site
    e = next(x for x in index["entries"] if x["id"] == "recipe:beta-whisper-cuda")
    browser.get((out / "entry" / f"{entry_slug(e['id'])}.html").as_uri())
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-copy-ready')") == "true")
    buttons = browser.find_elements("css selector", "button.copy")
    assert len(buttons) == len(browser.find_elements("css selector", "code.command")) >= 3
    buttons[0].click()
    assert browser.execute_script("return window.__lastCopied") == e["commands"]["install"]
    WebDriverWait(browser, 5).until(lambda d: buttons[0].text in ("Copied", "Select and copy"))
    body = browser.find_element("tag name", "body").text
    assert "Versions" in body and "1.0.0" in body
    browser.save_screenshot(str(shots / "entry-copy.png"))


CANON_JS = """
function canon(li) { const c = li.cloneNode(true); c.normalize(); return canon1(c); }
function canon1(n) {
  if (n.nodeType === 3) { const t = n.textContent.replace(/\\s+/g, ' '); return t.trim() ? t : null; }
  const attrs = Array.from(n.attributes).map(a => [a.name, a.value]).sort();
  return [n.tagName, attrs, Array.from(n.childNodes).map(canon1).filter(c => c !== null)];
}
"""


def test_items_built_by_the_script_are_the_templates_items(browser, site, tmp_path):
    """Results beyond the entries index.html holds are built by site.js from the page data:
    the same elements, attributes and text as templates/item.html writes (hostile entry too)."""
    index, out = site
    open_index(browser, out)
    pairs = browser.execute_script(CANON_JS + """
        return Array.from(document.querySelectorAll('#entries > li')).map(li =>
          [li.dataset.id, canon(li), canon(window.lemonpackCatalogue.buildItem(li.dataset.id))]);""")
    assert [p[0] for p in pairs] == [e["id"] for e in index["entries"]]
    for ident, server, built in pairs:
        assert built == server, ident


def test_a_long_list_shows_the_first_results_and_more_on_request(browser, tmp_path):
    """With more entries than index.html holds, the page shows 50 results and a button for the
    next 50; all.html lists every entry for JavaScript off."""
    base = hostile_index()
    template = base["entries"][1]
    extra = [dict(template, id=f"recipe:many-{i:03d}", name=f"many-{i:03d}", display_name=f"Many {i}")
             for i in range(120)]
    index = dict(base, entries=base["entries"] + extra)
    out = tmp_path / "long"
    render_site(index, out)
    front = (out / "index.html").read_text()
    assert front.count('class="entry"') == 50 and 'href="all.html"' in front
    assert (out / "all.html").read_text().count('class="entry"') == len(index["entries"])
    open_index(browser, out)
    assert len(visible_ids(browser)) == 50
    more = browser.find_element("id", "more")
    assert more.text == f"Show 50 more ({len(index['entries']) - 50} not shown)"
    more.click()
    assert visible_ids(browser) == [e["id"] for e in index["entries"]][:100]
    open_index(browser, out, "#q=many")
    assert browser.find_element("id", "summary").text == f"120 of {len(index['entries'])} entries"
    assert visible_ids(browser) == [e["id"] for e in extra][:50]
