// The card field, inside the gateway's own page (GET /elements/v1/card) that
// gatehouse.js frames on the merchant's checkout. The card number is typed
// here and sent from here to POST /v1/tokens (same origin as this page); the
// merchant's page only ever receives the token. Messages go to, and are
// accepted from, the one origin the framing page named (?origin=), and only
// from the window that framed this page.
(function () {
  'use strict';
  var params = new URLSearchParams(window.location.search);
  var key = params.get('key') || '';
  var parentOrigin = params.get('origin') || '';
  var form = document.getElementById('card');
  var fields = {
    number: document.getElementById('number'),
    exp: document.getElementById('exp'),
    cvc: document.getElementById('cvc')
  };
  var errorEl = document.getElementById('error');
  var busy = false;

  function tell(message) {
    if (!/^https?:\/\/[^/]+$/.test(parentOrigin) || window.parent === window) {
      return;
    }
    message.source = 'gatehouse-card';
    window.parent.postMessage(message, parentOrigin);
  }

  function digits(s) { return String(s).replace(/\D/g, ''); }

  function showError(message, param) {
    errorEl.textContent = message || '';
    Object.keys(fields).forEach(function (name) { fields[name].classList.remove('invalid'); });
    var field = param === 'card.number' ? fields.number
      : param === 'card.cvc' ? fields.cvc
      : (param === 'card.exp_month' || param === 'card.exp_year') ? fields.exp : null;
    if (field) { field.classList.add('invalid'); }
  }

  // "MM / YY", "MM/YYYY", "MMYY": month and four-digit year, or nulls.
  function expiry(s) {
    var parts = String(s).split(/\s*\/\s*/);
    var m, y;
    if (parts.length === 2) {
      m = digits(parts[0]); y = digits(parts[1]);
    } else {
      var d = digits(s);
      m = d.slice(0, 2); y = d.slice(2);
    }
    if (!m || !y) { return { month: null, year: null }; }
    var year = parseInt(y, 10);
    if (y.length === 2) { year += 2000; }
    return { month: parseInt(m, 10), year: year };
  }

  fields.number.addEventListener('input', function () {
    var d = digits(fields.number.value).slice(0, 19);
    fields.number.value = d.replace(/(\d{4})(?=\d)/g, '$1 ');
  });
  fields.cvc.addEventListener('input', function () {
    fields.cvc.value = digits(fields.cvc.value).slice(0, 4);
  });
  form.addEventListener('submit', function (ev) { ev.preventDefault(); });

  function createToken(requestId) {
    if (busy) {
      tell({ type: 'error', requestId: requestId, error: { code: 'busy', message: 'A token is already being created.' } });
      return;
    }
    busy = true;
    showError('');
    var exp = expiry(fields.exp.value);
    var body = {
      card: {
        number: digits(fields.number.value),
        exp_month: exp.month,
        exp_year: exp.year,
        cvc: digits(fields.cvc.value)
      }
    };
    fetch('/v1/tokens', {
      method: 'POST',
      headers: { 'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store'
    }).then(function (res) {
      return res.json().then(function (json) { return { ok: res.ok, json: json }; });
    }).then(function (r) {
      busy = false;
      if (r.ok) {
        tell({ type: 'token', requestId: requestId, token: r.json });
        return;
      }
      var e = (r.json && r.json.error) || { code: 'internal_error', message: 'The card could not be checked.' };
      showError(e.message, e.param);
      tell({ type: 'error', requestId: requestId, error: { code: e.code, message: e.message, param: e.param } });
    }).catch(function () {
      busy = false;
      showError('The card could not be sent. Check the connection and try again.');
      tell({ type: 'error', requestId: requestId, error: { code: 'network_error', message: 'The card could not be sent.' } });
    });
  }

  window.addEventListener('message', function (ev) {
    if (ev.origin !== parentOrigin || ev.source !== window.parent) { return; }
    var d = ev.data;
    if (!d || d.target !== 'gatehouse-card' || d.type !== 'createToken') { return; }
    createToken(String(d.requestId));
  });

  tell({ type: 'ready' });
})();
