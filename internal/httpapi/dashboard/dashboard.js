// Gatehouse dashboard: progressive enhancement only; every page and form
// works without it. It shows what is loading, asks before destructive
// actions, keeps a shown-once secret from being re-posted on reload, and
// refreshes pages whose work is still under way.
(function () {
  'use strict';
  var body = document.body;

  function loading() { body.classList.add('loading'); }

  // A secret shown once is the answer to a POST: make the history entry a
  // plain GET of the page, so that a reload shows the page without it and
  // never posts the form again.
  // The page names its own address (data-canonical) when it answers a form
  // posted elsewhere, such as a rotated secret shown after .../rotate.
  try { history.replaceState(null, '', body.dataset.canonical || (location.pathname + location.search)); } catch (e) { /* ignore */ }

  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    var button = ev.submitter || form.querySelector('button[type=submit]');
    var ask = (button && button.getAttribute('data-confirm')) || form.getAttribute('data-confirm');
    if (ask && !window.confirm(ask)) { ev.preventDefault(); return; }
    if (form.dataset.sent === 'true') { ev.preventDefault(); return; } // one submit per page
    if ((form.method || '').toLowerCase() === 'post') { form.dataset.sent = 'true'; }
    loading();
    if (button) {
      // A disabled submitter is not sent: keep its name/value in the form.
      if (button.name) {
        var keep = document.createElement('input');
        keep.type = 'hidden'; keep.name = button.name; keep.value = button.value;
        form.appendChild(keep);
      }
      button.setAttribute('aria-busy', 'true');
      if (button.dataset.busyText) { button.textContent = button.dataset.busyText; }
      setTimeout(function () { button.disabled = true; }, 0);
    }
  });

  document.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[href]');
    if (a && a.origin === location.origin && !ev.ctrlKey && !ev.metaKey && !ev.shiftKey && a.target !== '_blank') { loading(); }
  });

  // Back/forward cache: a restored page is not loading any more.
  window.addEventListener('pageshow', function () {
    body.classList.remove('loading');
    document.querySelectorAll('button[aria-busy]').forEach(function (b) { b.disabled = false; b.removeAttribute('aria-busy'); });
    document.querySelectorAll('form[data-sent]').forEach(function (f) { delete f.dataset.sent; });
  });

  // The evidence form: how many characters its fields hold, all together,
  // as the server counts them (characters, not UTF-16 units), kept up to
  // date as they are typed.
  var size = document.getElementById('evidence-size');
  var count = document.getElementById('evidence-chars');
  if (size && count) {
    var max = Number(size.dataset.max);
    var recount = function () {
      var n = 0;
      document.querySelectorAll('[data-evidence]').forEach(function (f) { n += Array.from(f.value.trim()).length; });
      count.textContent = n.toLocaleString('en-US');
      size.classList.toggle('over', n > max);
    };
    document.addEventListener('input', function (ev) { if (ev.target.hasAttribute && ev.target.hasAttribute('data-evidence')) { recount(); } });
  }

  // Work under way (a charge the worker has not finished, a delivery not yet
  // attempted): reload every two seconds, unless the user is typing.
  if (body.dataset.busy === 'true') {
    var touched = false;
    document.addEventListener('input', function () { touched = true; });
    var tries = 0;
    var tick = function () {
      tries++;
      var active = document.activeElement;
      var typing = active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
      if (!touched && !typing && tries <= 60) { location.reload(); return; }
      if (tries <= 60) { setTimeout(tick, 2000); }
    };
    setTimeout(tick, 2000);
  }
})();
