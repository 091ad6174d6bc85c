/* lemonpack catalogue: a "Copy" button beside every command of an entry page.
 * The command text is copied as shown (the page's own text, never HTML); nothing is fetched or
 * sent. navigator.clipboard where the page may use it, else a selection and execCommand('copy')
 * (pages opened from file:// may not have the asynchronous clipboard). The button says
 * "Copied" (or "Select and copy" when neither works) for two seconds. */
(function () {
  'use strict';
  function fallback(text) {
    var area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok;
  }
  function say(button, text) {
    button.textContent = text;
    setTimeout(function () { button.textContent = 'Copy'; }, 2000);
  }
  Array.prototype.forEach.call(document.querySelectorAll('code.command'), function (code) {
    var pre = code.parentNode;
    var button = document.createElement('button');
    button.type = 'button';
    button.className = 'copy';
    button.textContent = 'Copy';
    button.setAttribute('aria-label', 'Copy this command');
    button.addEventListener('click', function () {
      var text = code.textContent;
      window.__lastCopied = text;
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { say(button, 'Copied'); }, function () {
          say(button, fallback(text) ? 'Copied' : 'Select and copy');
        });
      } else {
        say(button, fallback(text) ? 'Copied' : 'Select and copy');
      }
    });
    pre.parentNode.insertBefore(button, pre.nextSibling);
  });
  document.body.setAttribute('data-copy-ready', 'true');
})();
