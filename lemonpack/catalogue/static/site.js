/* lemonpack catalogue: search, facets and "runs on this host" for the static site.
 *
 * Data: window.CATALOGUE (assets/catalogue-data.js, the page data: see decode()). index.html lists
 * the first entries in index order and all.html every entry (the site is readable with JavaScript
 * off); this script shows the first 50 results of the current filters (more on request), built
 * from the page data as templates/item.html writes them. Nothing is fetched or sent anywhere.
 *
 * Search semantics (docs/catalogue.md; identical to `lemonpack catalogue search`, whose
 * lemonpack/catalogue/search.py this file follows function by function): the vocabulary is
 * window.CATALOGUE_RULES (assets/search-rules.js, the same static/search-rules.json the CLI reads:
 * synonyms, phrases, arch families). query = whitespace-separated terms, case-insensitive, known
 * phrases joined ("text to speech"), each term a group of alternatives (its synonyms); an entry
 * matches when EVERY term has an alternative that is a substring of one of: id, name,
 * display_name, publisher, tags, capabilities, description, platform words (os, accelerator,
 * os/accelerator, archs), or when the term is a known GPU arch the entry runs on. A one-word term
 * without synonyms that no entry has is replaced by its near miss (optimal string alignment
 * distance <= 1 up to 5 characters, <= 2 above; fewest edits, then alphabetical) among the
 * index's words. Filters (ANDed; several values of one facet = any of): kind, capability, os,
 * accelerator, gpu_arch (runsOnArch: listed, or any arch of the accelerator for an any-arch
 * platform), official ("true"/"false"), signature, pinning, reproducible (statuses), publisher.
 * Result order: ranked, index order within a rank (rank 0: every term in the id or name; 1: some
 * term there; 2: none), as search.py's rank(); without terms, index order.
 *
 * Filter state lives in the URL fragment: #q=strix&kind=recipe&os=linux&os=windows&fits=1
 * (URLSearchParams encoding), so a filtered view can be shared; loading such a URL restores it.
 *
 * Host fit: the CLI's rule (lemonpack/catalogue/fits.py host_fit: select_accelerator as `run`
 * chooses, then `install`'s plan_install), written out in fit() below. The host file is
 * `lemonpack host --json`: {"os", "accelerators", "rocm_arch", "cuda_arch"}; cpu is always
 * present. Among the entry's platforms for host.os, the accelerator is chosen as run would:
 * the entry's default_accelerator if it has that block, else the first of metal (darwin only),
 * cuda, rocm, vulkan, gpu, cpu that both the entry and the host have, else the first declared.
 * The entry fits when the host has that accelerator and, unless the platform runs on any arch,
 * the host's arch for it is among its archs (rocm -> rocm_arch, cuda -> cuda_arch,
 * cpu/npu/tpu/metal -> none, other GPU APIs -> rocm_arch or else cuda_arch; HostFacts.gpu_arch).
 * The install arguments name --accelerator when the OS has several platforms and --arch when a
 * listed arch's build is the one installed. Otherwise the page says why, in the CLI's words.
 */
(function () {
  'use strict';
  var started = performance.now();

  var FACETS = ['kind', 'capability', 'os', 'accelerator', 'gpu_arch', 'official', 'signature',
                'pinning', 'reproducible', 'publisher'];
  // Python's str.split() whitespace: Unicode White_Space plus the \x1c-\x1f separators.
  var WS = /[\s\x1c-\x1f\x85]+/;

  var catalogue = window.CATALOGUE || { entries: [] };
  var RULES = window.CATALOGUE_RULES || { arch_families: {}, synonyms: {}, phrases: [] };
  var KNOWN_ARCHS = {};
  Object.keys(RULES.arch_families).forEach(function (k) {
    RULES.arch_families[k].forEach(function (a) { KNOWN_ARCHS[a] = true; });
  });
  var entries = decode(catalogue);

  // assets/catalogue-data.js holds the page data (lemonpack.catalogue.site.page_data): one array
  // per entry, in the order of `fields`; platforms as [os, accelerator, archs], statuses as
  // strings. Back to the index's entry shape (the fields the page reads), or, for a full
  // catalogue.json-shaped object, its entries as they are.
  function decode(data) {
    var rows = Array.isArray(data.entries) ? data.entries : [];
    if (!Array.isArray(data.fields)) { return rows; }
    var fields = data.fields;
    return rows.map(function (row) {
      var e = {};
      for (var i = 0; i < fields.length; i++) {
        var k = fields[i], v = row[i];
        if (v === null || v === undefined) { continue; }
        if (k === 'platforms') {
          e.platforms = v.map(function (p) {
            return { os: p[0], accelerator: p[1], archs: p[2], any_arch: p[3] === undefined ? !p[2].length : p[3] };
          });
        } else if (k === 'signature' || k === 'pinning' || k === 'reproducible') {
          e[k] = { status: v };
        } else {
          e[k] = v;
        }
      }
      return e;
    });
  }

  function str(v) { return typeof v === 'string' ? v : ''; }
  function list(v) { return Array.isArray(v) ? v : []; }

  // ---- search (pure) ---------------------------------------------------------------------
  function platformWords(e) {
    var words = [];
    list(e.platforms).forEach(function (p) {
      var o = str(p && p.os), a = str(p && p.accelerator);
      words.push(o, a, o + '/' + a);
      list(p && p.archs).forEach(function (x) { words.push(String(x)); });
    });
    return words.join(' ');
  }

  function haystack(e) {
    var fields = [str(e.id), str(e.name), str(e.display_name), str(e.publisher)]
      .concat(list(e.tags).map(str), list(e.capabilities).map(str), [str(e.description), platformWords(e)]);
    return fields.map(function (f) { return f.toLowerCase(); });
  }

  /** search.py runs_on_arch: the arch is listed, or the platform runs on any arch of its accelerator. */
  function runsOnArch(e, arch) {
    return list(e.platforms).some(function (p) {
      var archs = list(p && p.archs);
      if (archs.indexOf(arch) >= 0) { return true; }
      var anyArch = p && p.any_arch !== undefined ? p.any_arch : !archs.length;
      return anyArch && list(RULES.arch_families[p && p.accelerator]).indexOf(arch) >= 0;
    });
  }

  function facetValues(e, facet) {
    var platforms = list(e.platforms);
    switch (facet) {
      case 'kind': return [str(e.kind)];
      case 'capability': return list(e.capabilities).map(str);
      case 'os': return platforms.map(function (p) { return str(p && p.os); });
      case 'accelerator': return platforms.map(function (p) { return str(p && p.accelerator); });
      case 'official': return [e.official === true ? 'true' : 'false'];
      case 'signature': return [str(e.signature && e.signature.status)];
      case 'pinning': return [str(e.pinning && e.pinning.status)];
      case 'reproducible': return [str(e.reproducible && e.reproducible.status)];
      case 'publisher': return [str(e.publisher)];
    }
    return [];
  }

  /** search.py terms(): lower-cased words, phrases joined, each a list of alternatives (the term first). */
  function terms(query) {
    var words = str(query).toLowerCase().split(WS).filter(function (t) { return t.length > 0; });
    var out = [], i = 0;
    while (i < words.length) {
      var word = null;
      for (var k = 0; k < RULES.phrases.length; k++) {
        var phrase = RULES.phrases[k], n = phrase.split(' ').length;
        if (words.slice(i, i + n).join(' ') === phrase) { word = phrase; i += n; break; }
      }
      if (word === null) { word = words[i]; i += 1; }
      out.push(group(word));
    }
    return out;
  }

  function group(word) {
    return [word].concat(list(RULES.synonyms[word]).filter(function (s) { return s !== word; }));
  }

  // filters: {facet: value | [values]}; booleans become "true"/"false". Unknown facets are ignored.
  function normaliseFilters(filters) {
    var out = {};
    Object.keys(filters || {}).forEach(function (k) {
      if (FACETS.indexOf(k) < 0) { return; }
      var v = filters[k];
      var vals = (Array.isArray(v) ? v : [v]).map(function (x) {
        return typeof x === 'boolean' ? (x ? 'true' : 'false') : String(x);
      });
      if (vals.length) { out[k] = vals; }
    });
    return out;
  }

  function prepared(e) {
    return { entry: e, hay: haystack(e).join('\n'), facets: FACETS.reduce(function (acc, f) {
      acc[f] = facetValues(e, f); return acc; }, {}) };
  }

  function termMatches(p, alts) {
    for (var j = 0; j < alts.length; j++) {
      if (p.hay.indexOf(alts[j]) >= 0) { return true; }
    }
    return KNOWN_ARCHS[alts[0]] === true && runsOnArch(p.entry, alts[0]);
  }

  function matches(p, ts, filters) {
    for (var i = 0; i < ts.length; i++) {
      if (!termMatches(p, ts[i])) { return false; }
    }
    for (var f in filters) {
      var want = filters[f], any = false;
      if (f === 'gpu_arch') {
        any = want.some(function (a) { return runsOnArch(p.entry, a); });
      } else {
        var have = p.facets[f];
        for (var k = 0; k < want.length; k++) {
          if (have.indexOf(want[k]) >= 0) { any = true; break; }
        }
      }
      if (!any) { return false; }
    }
    return true;
  }

  var PREPARED = null; // built on the first search that has a term or a filter
  var VOCAB = null;    // built on the first near miss

  /** search.py osa_distance: insertions, deletions, substitutions, swaps of two neighbours. */
  function osaDistance(a, b) {
    var d = [], i, j;
    for (i = 0; i <= a.length; i++) { d.push([i]); }
    for (j = 1; j <= b.length; j++) { d[0][j] = j; }
    for (i = 1; i <= a.length; i++) {
      for (j = 1; j <= b.length; j++) {
        var cost = a[i - 1] === b[j - 1] ? 0 : 1;
        d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
        if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
          d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.length][b.length];
  }

  function maxDistance(term) { return term.length < 3 ? 0 : (term.length <= 5 ? 1 : 2); }

  /** search.py vocabulary(): the index's words a near miss is corrected to, sorted. */
  function vocabulary() {
    var words = {};
    Object.keys(RULES.synonyms).forEach(function (w) { if (w.indexOf(' ') < 0) { words[w] = true; } });
    var TOKEN = /[a-z0-9]+(?:[._-][a-z0-9]+)*/g;
    entries.forEach(function (e) {
      var texts = [e.id, e.name, e.display_name, e.publisher].concat(list(e.tags), list(e.capabilities),
                                                                   [platformWords(e)]);
      texts.forEach(function (t) {
        if (typeof t !== 'string') { return; }
        (t.toLowerCase().match(TOKEN) || []).forEach(function (tok) {
          words[tok] = true;
          tok.split(/[._-]/).forEach(function (part) { words[part] = true; });
        });
      });
    });
    return Object.keys(words).filter(function (w) { return w.length >= 3; }).sort();
  }

  function suggest(term, vocab) {
    var limit = maxDistance(term), best = null, bestD = 0, chars = {};
    for (var c = 0; c < term.length; c++) { chars[term[c]] = true; }
    for (var i = 0; i < vocab.length; i++) {
      var w = vocab[i];
      if (Math.abs(w.length - term.length) > limit || w === term) { continue; }
      // search.py's bound: each character of w that term lacks costs an edit
      var lacks = {}, n = 0;
      for (var k = 0; k < w.length && n <= limit; k++) {
        if (!chars[w[k]] && !lacks[w[k]]) { lacks[w[k]] = true; n++; }
      }
      if (n > limit) { continue; }
      var d = osaDistance(term, w);
      if (d <= limit && (best === null || d < bestD)) { best = w; bestD = d; }
    }
    return best;
  }

  /** 0 when every term is in the entry's id or name, 1 when some term is, else 2 (search.py rank()). */
  function rank(e, ts) {
    var names = (str(e.id) + '\n' + str(e.name)).toLowerCase(), hits = 0;
    ts.forEach(function (alts) {
      if (alts.some(function (a) { return names.indexOf(a) >= 0; })) { hits++; }
    });
    return hits === ts.length ? 0 : (hits ? 1 : 2);
  }

  /** search.py search_report: {ids: the ids matching `query` and `filters` ({facet: value |
   *  [values]}), ranked (index order within a rank); corrected: {term: near miss used}}. */
  function searchReport(query, filters) {
    var ts = terms(query), fs = normaliseFilters(filters), corrected = {};
    if (!ts.length && !Object.keys(fs).length) {
      return { ids: entries.map(function (e) { return e.id; }), corrected: corrected };
    }
    PREPARED = PREPARED || entries.map(prepared);
    ts.forEach(function (t, k) {
      if (t.length > 1 || PREPARED.some(function (p) { return termMatches(p, t); })) { return; }
      VOCAB = VOCAB || vocabulary();
      var word = suggest(t[0], VOCAB);
      if (word !== null) { corrected[t[0]] = word; ts[k] = group(word); }
    });
    var found = PREPARED.filter(function (p) { return matches(p, ts, fs); });
    if (ts.length) {
      var ranked = [[], [], []];
      found.forEach(function (p) { ranked[rank(p.entry, ts)].push(p); });
      found = ranked[0].concat(ranked[1], ranked[2]);
    }
    return { ids: found.map(function (p) { return p.entry.id; }), corrected: corrected };
  }

  function search(query, filters) { return searchReport(query, filters).ids; }

  var SORTS = ['relevance', 'name', 'new', 'updated'];
  var BY_ID = {};
  entries.forEach(function (e) { BY_ID[e.id] = e; });

  /** search.py sort_entries: `ids` in `order`; relevance as given; name by name then id; new /
   *  updated by the first / latest version's date, newest first; ties keep the order given. */
  function sortIds(ids, order) {
    if (order !== 'name' && order !== 'new' && order !== 'updated') { return ids.slice(); }
    var key = order === 'new' ? 'added' : 'updated';
    function cmp(x, y) { return x < y ? -1 : (x > y ? 1 : 0); }
    return ids.map(function (id, i) { return [BY_ID[id] || {}, i, id]; }).sort(function (a, b) {
      var c = order === 'name' ? (cmp(str(a[0].name), str(b[0].name)) || cmp(str(a[0].id), str(b[0].id)))
                               : cmp(str(b[0][key]), str(a[0][key]));
      return c || a[1] - b[1];
    }).map(function (x) { return x[2]; });
  }

  // ---- host fit (pure) -------------------------------------------------------------------
  var OS_NAMES = ['linux', 'darwin', 'windows'];

  /** Validate a parsed `lemonpack host --json` document; returns {os, accelerators, rocm_arch,
   *  cuda_arch} or throws an Error naming the problem. */
  function parseHost(data) {
    if (!data || typeof data !== 'object' || Array.isArray(data)) { throw new Error('not a JSON object'); }
    var known = ['os', 'accelerators', 'rocm_arch', 'cuda_arch'];
    Object.keys(data).forEach(function (k) {
      if (known.indexOf(k) < 0) { throw new Error('unknown key ' + JSON.stringify(k)); }
    });
    if (OS_NAMES.indexOf(data.os) < 0) { throw new Error('"os" must be one of ' + OS_NAMES.join(', ')); }
    var accels = data.accelerators === undefined ? ['cpu'] : data.accelerators;
    if (!Array.isArray(accels) || !accels.every(function (a) { return typeof a === 'string'; })) {
      throw new Error('"accelerators" must be a list of strings');
    }
    ['rocm_arch', 'cuda_arch'].forEach(function (k) {
      if (data[k] !== undefined && data[k] !== null && typeof data[k] !== 'string') {
        throw new Error(JSON.stringify(k) + ' must be a string or null');
      }
    });
    accels = accels.concat(['cpu']).filter(function (a, i, all) { return all.indexOf(a) === i; });
    return { os: data.os, accelerators: accels, rocm_arch: data.rocm_arch || null,
             cuda_arch: data.cuda_arch || null };
  }

  function hostGpuArch(host, accel) {
    if (accel === 'rocm') { return host.rocm_arch; }
    if (accel === 'cuda') { return host.cuda_arch; }
    if (['cpu', 'npu', 'tpu', 'metal'].indexOf(accel) >= 0) { return null; }
    return host.rocm_arch || host.cuda_arch;
  }

  var DETECTION_ORDER = ['cuda', 'rocm', 'vulkan', 'gpu', 'cpu'];

  /** A size as lemonpack/catalogue/models.py's _size writes it ("1.5 GiB", "12 B"). */
  function sizeText(n) {
    var units = [['GiB', 1073741824], ['MiB', 1048576], ['KiB', 1024]];
    for (var i = 0; i < units.length; i++) {
      if (n >= units[i][1]) { return (n / units[i][1]).toFixed(1) + ' ' + units[i][0]; }
    }
    return n + ' B';
  }

  /** A model entry's fit: the CLI's rule (lemonpack.catalogue.models.model_fit) with the budget
   *  unknown, since a page cannot read the host's memory (`catalogue show` compares it). */
  function modelFit(e) {
    var need = typeof e.memory === 'number' ? e.memory
      : (e.model && e.model.memory && typeof e.model.memory.bytes === 'number' ? e.model.memory.bytes : null);
    if (need === null) { return { fits: false, platform: null, installArgs: [], reason: 'no memory estimate recorded' }; }
    return { fits: true, platform: null, installArgs: [],
             reason: 'needs ' + sizeText(need) + "; this host's memory budget is unknown" };
  }

  /** {fits: bool, platform: the platform used or null, reason: text}; the CLI's rule
   *  (lemonpack.catalogue.fits.fits_host, through lemonpack.contract.select.select_accelerator). */
  function fit(e, host) {
    if (e.kind === 'model') { return modelFit(e); }
    var platforms = list(e.platforms);
    var onOs = platforms.filter(function (p) { return p && p.os === host.os; });
    if (!onOs.length) {
      var oses = [];
      platforms.forEach(function (p) { if (p && oses.indexOf(p.os) < 0) { oses.push(str(p.os)); } });
      oses.sort();
      return { fits: false, platform: null, installArgs: [],
               reason: 'no platform for ' + host.os + ' (offers: ' + (oses.join(', ') || 'none') + ')' };
    }
    var blocks = [];
    onOs.forEach(function (p) { if (blocks.indexOf(p.accelerator) < 0) { blocks.push(p.accelerator); } });
    // select_accelerator: default_accelerator, then detection order among the host's, then the first.
    var accel = null;
    if (e.default_accelerator && blocks.indexOf(e.default_accelerator) >= 0) { accel = e.default_accelerator; }
    var order = (host.os === 'darwin' ? ['metal'] : []).concat(DETECTION_ORDER);
    for (var i = 0; accel === null && i < order.length; i++) {
      if (blocks.indexOf(order[i]) >= 0 && host.accelerators.indexOf(order[i]) >= 0) { accel = order[i]; }
    }
    if (accel === null) { accel = blocks[0]; }
    if (host.accelerators.indexOf(accel) < 0) {
      return { fits: false, platform: null, installArgs: [], reason: 'needs ' + blocks.slice().sort().join(' or ') + ' on ' +
               host.os + '; the host has ' + host.accelerators.slice().sort().join(', ') };
    }
    var plat = onOs.filter(function (p) { return p.accelerator === accel; })[0];
    var arch = hostGpuArch(host, accel);
    var archs = list(plat.archs);
    var anyArch = plat.any_arch !== undefined ? plat.any_arch : !archs.length;
    var matched = !!arch && archs.indexOf(arch) >= 0;
    if (!anyArch && !matched) {
      return { fits: false, platform: null, installArgs: [], reason: host.os + '/' + accel + ' is built for ' +
               archs.join(', ') + "; the host's GPU is " + (arch || 'unknown') };
    }
    var args = blocks.length > 1 ? ['--accelerator', accel] : [];
    if (matched) { args.push('--arch', arch); }
    return { fits: true, platform: plat, installArgs: args,
             reason: host.os + '/' + accel + (matched ? ' ' + arch : '') };
  }

  // ---- the page --------------------------------------------------------------------------
  var api = { search: search, searchReport: searchReport, sortIds: sortIds, fit: fit, parseHost: parseHost,
              FACETS: FACETS };
  window.lemonpackCatalogue = api;

  var form = document.getElementById('filters');
  var list_ = document.getElementById('entries');
  if (!form || !list_) { return; }
  var qInput = document.getElementById('q');
  var summary = document.getElementById('summary');
  var empty = document.getElementById('empty');
  var hostInput = document.getElementById('hostfile');
  var hostStatus = document.getElementById('host-status');
  var onlyFits = document.getElementById('only-fits');
  var sortSelect = document.getElementById('sort');
  var panel = document.getElementById('facet-panel');
  // wide screens show the filters beside the results; narrow ones fold them above (one line)
  if (panel && window.matchMedia && window.matchMedia('(min-width: 761px)').matches) { panel.open = true; }
  // The list shows the first PAGE results; "Show more" adds the next PAGE. index.html holds
  // the first entries' items already (the rest are in all.html for JavaScript off); any other
  // item is built from the page data as templates/item.html writes it (buildItem), once.
  var PAGE = 50;
  var limit = PAGE;
  var items = {};
  Array.prototype.forEach.call(list_.children, function (li) { items[li.getAttribute('data-id')] = li; });
  var hostFits = null; // {id: fit result} once a host file was loaded
  var moreLine = document.getElementById('more-line');
  if (!moreLine) {
    moreLine = document.createElement('p');
    moreLine.id = 'more-line';
    moreLine.className = 'more';
    list_.parentNode.insertBefore(moreLine, list_.nextSibling);
  }
  var moreButton = document.createElement('button');
  moreButton.type = 'button';
  moreButton.id = 'more';
  while (moreLine.firstChild) { moreLine.removeChild(moreLine.firstChild); }
  moreLine.appendChild(moreButton);
  moreLine.hidden = true;
  var LABELS = catalogue.labels || {};

  // lemonpack.errors.visible_bidi (what the templates' finalize does to every value)
  var BIDI = /[\u202a-\u202e\u2066-\u2069]/g;
  function vis(v) {
    return String(v).replace(BIDI, function (c) { return '\\u' + ('000' + c.charCodeAt(0).toString(16)).slice(-4); });
  }

  function node(tag, attrs, children) {
    var n = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      n.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return n;
  }

  function label(kind, status) {
    var t = LABELS[kind] || [{}, ''];
    return typeof status === 'string' && Object.prototype.hasOwnProperty.call(t[0], status) ? t[0][status] : t[1];
  }

  function badge(kind, value, text) {
    return node('span', { 'class': 'badge ' + vis(kind) + '-' + vis(value) }, [vis(text)]);
  }

  /** templates/item.html, from the page data (every text through vis(), as autoescaped Jinja). */
  function buildItem(e) {
    var meta = [node('code', {}, [vis(e.id)]), ' \u00b7 ' + vis(str(e.kind)) + ' \u00b7 ',
                e.official === true ? badge('official', 'true', 'official') : badge('official', 'false', 'community'),
                ' \u00b7 by ' + vis(str(e.publisher))];
    if (e.version) { meta.push(' \u00b7 v', node('bdi', {}, [vis(e.version)])); }
    if (e.license) { meta.push(' \u00b7 ', node('bdi', {}, [vis(e.license)])); }
    if (e.updated) { meta.push(' \u00b7 updated ', node('time', { datetime: vis(e.updated) }, [vis(e.updated.slice(0, 10))])); }
    var status = function (k) { return e[k] && e[k].status; };
    var tags = [];
    list(e.platforms).forEach(function (p) {
      var archs = list(p.archs);
      tags.push(node('b', {}, [vis(str(p.os)) + '/' + vis(str(p.accelerator)) +
                               (archs.length ? ' (' + archs.map(vis).join(', ') + ')' : '')]), ' ');
    });
    if (!list(e.platforms).length) { tags.push('no platforms listed '); }
    list(e.capabilities).forEach(function (c, i, all) {
      tags.push(node('i', {}, [vis(c)]));
      if (i < all.length - 1) { tags.push(' '); }
    });
    var children = [node('h2', {}, [node('a', { href: 'entry/' + e.slug + '.html' }, [node('bdi', {}, [vis(e.display_name || e.name)])])]),
                    node('p', { 'class': 'meta' }, meta)];
    if (e.description) { children.push(node('p', { 'class': 'desc', dir: 'auto' }, [vis(str(e.summary))])); }
    children.push(node('p', { 'class': 'badges' }, [
      badge('signature', status('signature'), label('signature', status('signature'))), ' ',
      badge('pinning', status('pinning'), label('pinning', status('pinning'))), ' ',
      badge('reproducible', status('reproducible'), label('reproducible', status('reproducible')))]),
      node('p', { 'class': 'tags' }, tags));
    return node('li', { 'class': 'entry', 'data-id': vis(e.id) }, children);
  }

  api.buildItem = function (id) { return BY_ID[id] ? buildItem(BY_ID[id]) : null; };

  /** The list item of `id`, with its host fit line when a host file was loaded. */
  function itemFor(id) {
    var li = items[id];
    if (!li) { li = items[id] = buildItem(BY_ID[id] || { id: id }); }
    if (hostFits && hostFits[id]) {
      var r = hostFits[id], p = li.querySelector('.fit');
      if (!p) { p = document.createElement('p'); p.className = 'fit'; li.appendChild(p); }
      li.classList.toggle('fits', r.fits);
      li.classList.toggle('no-fit', !r.fits);
      p.hidden = false;
      p.textContent = r.fits ? 'Runs on this host: ' + r.reason +
        (r.installArgs.length ? ' (install with ' + r.installArgs.join(' ') + ')' : '')
        : 'Does not run on this host: ' + r.reason;
    }
    return li;
  }

  function checkboxes(facet) {
    return Array.prototype.slice.call(form.querySelectorAll('input[type=checkbox][name="' + facet + '"]'));
  }

  function addCheckbox(facet, value) {
    var fieldset = form.querySelector('fieldset[data-facet="' + facet + '"]');
    if (!fieldset) { return; }
    var label = document.createElement('label');
    label.className = 'extra';
    var box = document.createElement('input');
    box.type = 'checkbox';
    box.name = facet;
    box.value = value;
    var count = document.createElement('span');
    count.className = 'count';
    count.textContent = '0';
    label.appendChild(box);
    label.appendChild(document.createTextNode(' ' + value + ' '));
    label.appendChild(count);
    fieldset.appendChild(label);
  }

  function currentState() {
    var filters = {};
    FACETS.forEach(function (f) {
      var vals = checkboxes(f).filter(function (c) { return c.checked; }).map(function (c) { return c.value; });
      if (vals.length) { filters[f] = vals; }
    });
    return { q: qInput.value, filters: filters, fits: onlyFits.checked, sort: sortSelect ? sortSelect.value : 'relevance' };
  }

  function stateToFragment(state) {
    var params = new URLSearchParams();
    if (state.q.trim()) { params.append('q', state.q); }
    FACETS.forEach(function (f) { (state.filters[f] || []).forEach(function (v) { params.append(f, v); }); });
    if (state.fits) { params.append('fits', '1'); }
    if (state.sort && state.sort !== 'relevance') { params.append('sort', state.sort); }
    var s = params.toString();
    return s ? '#' + s : '';
  }

  function fragmentToState(hash) {
    var params = new URLSearchParams(String(hash || '').replace(/^#/, ''));
    var filters = {};
    FACETS.forEach(function (f) { var v = params.getAll(f); if (v.length) { filters[f] = v; } });
    var sort = params.get('sort');
    return { q: params.get('q') || '', filters: filters, fits: params.get('fits') === '1',
             sort: SORTS.indexOf(sort) >= 0 ? sort : 'relevance' };
  }

  function applyStateToForm(state) {
    qInput.value = state.q;
    FACETS.forEach(function (f) {
      var want = state.filters[f] || [];
      var have = checkboxes(f).map(function (c) { return c.value; });
      // A shared link may name a value this index does not have (gpu_arch=gfx1100): keep it as a
      // checked box of its own, so the view shows no match instead of silently ignoring it.
      want.forEach(function (v) { if (have.indexOf(v) < 0) { addCheckbox(f, v); } });
      checkboxes(f).forEach(function (c) { c.checked = want.indexOf(c.value) >= 0; });
    });
    onlyFits.checked = state.fits;
    if (sortSelect) { sortSelect.value = state.sort; }
  }

  var visible = []; // the ids the current state shows, in order

  /** Show the first `limit` of `visible` (the list's children replaced only when they differ). */
  function showList() {
    var want = visible.slice(0, limit), kids = list_.children;
    var same = kids.length === want.length;
    for (var i = 0; same && i < want.length; i++) { same = kids[i].getAttribute('data-id') === want[i]; }
    if (!same) {
      var frag = document.createDocumentFragment();
      want.forEach(function (id) { frag.appendChild(itemFor(id)); });
      list_.replaceChildren(frag);
    } else if (hostFits) {
      want.forEach(itemFor);
    }
    var rest = visible.length - want.length;
    moreLine.hidden = rest <= 0;
    moreButton.textContent = 'Show ' + Math.min(PAGE, rest) + ' more (' + rest + ' not shown)';
  }

  function render() {
    var state = currentState();
    var report = searchReport(state.q, state.filters), ids = sortIds(report.ids, state.sort);
    if (state.fits && hostFits) { ids = ids.filter(function (id) { return hostFits[id] && hostFits[id].fits; }); }
    visible = ids;
    limit = PAGE;
    showList();
    var count = ids.length;
    var fixes = Object.keys(report.corrected).map(function (t) {
      return 'no entry has \u201c' + t + '\u201d: showing results for \u201c' + report.corrected[t] + '\u201d';
    });
    summary.textContent = count + ' of ' + entries.length + ' entries' + (fixes.length ? ' (' + fixes.join('; ') + ')' : '');
    empty.hidden = count !== 0;
    var frag = stateToFragment(state);
    if (frag !== window.location.hash && !(frag === '' && window.location.hash === '#')) {
      history.replaceState(null, '', frag || window.location.pathname + window.location.search);
    }
  }

  moreButton.addEventListener('click', function () { limit += PAGE; showList(); });

  function showFits(host) {
    hostFits = {};
    var n = 0;
    entries.forEach(function (e) {
      var r = fit(e, host);
      hostFits[e.id] = r;
      if (r.fits) { n++; }
    });
    var arch = [host.rocm_arch, host.cuda_arch].filter(Boolean).join(', ');
    hostStatus.textContent = 'Host: ' + host.os + ', ' + host.accelerators.join(', ') +
      (arch ? ' (' + arch + ')' : '') + ': ' + n + ' of ' + entries.length + ' entries fit.';
    document.body.setAttribute('data-host-loaded', 'true');
    render();
  }

  hostInput.addEventListener('change', function () {
    var file = hostInput.files && hostInput.files[0];
    if (!file) { return; }
    var reader = new FileReader();
    reader.onload = function () {
      try {
        showFits(parseHost(JSON.parse(String(reader.result))));
      } catch (err) {
        hostStatus.textContent = 'Cannot use ' + file.name + ': ' + err.message +
          ' (expected the output of lemonpack host --json)';
        document.body.setAttribute('data-host-loaded', 'error');
      }
    };
    reader.readAsText(file);
  });

  form.addEventListener('input', render);
  form.addEventListener('change', function (ev) { if (ev.target !== hostInput) { render(); } });
  form.addEventListener('submit', function (ev) { ev.preventDefault(); render(); });
  // "Clear filters" clears query, facets and the only-fits box (not a loaded host file).
  form.addEventListener('reset', function (ev) {
    ev.preventDefault();
    applyStateToForm(fragmentToState(''));
    render();
  });
  window.addEventListener('hashchange', function () {
    applyStateToForm(fragmentToState(window.location.hash));
    render();
  });

  applyStateToForm(fragmentToState(window.location.hash));
  render();
  document.body.setAttribute('data-ready', 'true');
  // the searched texts of every entry, made once while the reader looks at the first screen
  setTimeout(function () { PREPARED = PREPARED || entries.map(prepared); }, 0);
  window.__catalogueStart = started;
  window.__catalogueReady = performance.now();
})();
