// The card field, inside the gateway's own page (GET /elements/v1/card) that
// gatehouse.js frames on the merchant's checkout. The card number is typed
// here and sent from here to POST /v1/tokens (same origin as this page); the
// merchant's page only ever receives the token. Messages go to, and are
// accepted from, the one origin the framing page named (?origin=), and only
// from the window that framed this page.
//
// For a charge made from a token this page created (gatehouse.handleNextAction),
// it asks POST /elements/v1/next_action for the charge's challenge, shows the
// issuer's page in a frame of its own, hears from that frame (this origin's
// done page) when the cardholder answered, and waits until the charge settles.
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
  var challengeEl = document.getElementById('challenge');
  var busy = ''; // what the field is doing: a token or an authentication
  // The card tokens this page created (the last maxTokens): the gateway
  // shows the challenge only of a charge made from one of them.
  var tokens = [];
  var maxTokens = 20;
  var challengeHeight = 400;
  var pollEvery = 500; // while the charge settles
  var watchEvery = 5000; // while the cardholder answers
  var settleWithin = 30000;

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
      tell({ type: 'error', requestId: requestId, error: { code: 'busy', message: busy } });
      return;
    }
    busy = 'A token is already being created.';
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
      busy = '';
      if (r.ok) {
        tokens.push(r.json.id);
        if (tokens.length > maxTokens) { tokens.shift(); }
        tell({ type: 'token', requestId: requestId, token: r.json });
        return;
      }
      var e = (r.json && r.json.error) || { code: 'internal_error', message: 'The card could not be checked.' };
      showError(e.message, e.param);
      tell({ type: 'error', requestId: requestId, error: { code: e.code, message: e.message, param: e.param } });
    }).catch(function () {
      busy = '';
      showError('The card could not be sent. Check the connection and try again.');
      tell({ type: 'error', requestId: requestId, error: { code: 'network_error', message: 'The card could not be sent.' } });
    });
  }

  function failure(code, message) { return { code: code, message: message }; }

  // nextActionOf is the gateway's view of the charge for this card field.
  function nextActionOf(chargeId) {
    return fetch('/elements/v1/next_action', {
      method: 'POST',
      headers: { 'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ charge: chargeId, tokens: tokens }),
      credentials: 'omit',
      cache: 'no-store'
    }).then(function (res) {
      return res.json().then(function (json) {
        if (res.ok) { return json; }
        var e = (json && json.error) || {};
        throw failure(e.code || 'internal_error', e.message || 'The charge could not be checked.');
      }, function () {
        throw failure('internal_error', 'The gateway answered ' + res.status + '.');
      });
    }, function () {
      throw failure('network_error', 'The charge could not be checked. Check the connection and try again.');
    });
  }

  function showChallenge(url) {
    var f = document.createElement('iframe');
    f.src = url;
    f.title = 'Authenticate your payment';
    f.id = 'challenge-frame';
    challengeEl.appendChild(f);
    form.hidden = true;
    challengeEl.hidden = false;
    tell({ type: 'resize', height: challengeHeight });
    return f;
  }

  function hideChallenge() {
    challengeEl.textContent = '';
    challengeEl.hidden = true;
    form.hidden = false;
    tell({ type: 'resize', height: null });
  }

  function httpURL(u) {
    try { return /^https?:$/.test(new URL(u, window.location.href).protocol); } catch (e) { return false; }
  }

  // handleNextAction shows the charge's challenge, if it has one, and
  // answers once the charge no longer requires action.
  function handleNextAction(requestId, chargeId) {
    if (busy) {
      tell({ type: 'error', requestId: requestId, error: failure('busy', busy) });
      return;
    }
    if (tokens.length === 0) {
      tell({ type: 'error', requestId: requestId, error: failure('resource_missing',
        'This card field created no card token since the page loaded: only the card field that collected the card can show its challenge.') });
      return;
    }
    busy = 'The card field is already authenticating a charge.';
    showError('');
    var frame = null;
    var answered = false;
    var deadline = Date.now() + settleWithin;
    var timer = null;
    var asking = false;

    function end(message) {
      busy = '';
      clearTimeout(timer);
      window.removeEventListener('message', onChallengeDone);
      if (frame) { hideChallenge(); }
      message.requestId = requestId;
      tell(message);
    }
    function later() {
      timer = setTimeout(check, frame && !answered ? watchEvery : pollEvery);
    }
    function check() {
      asking = true;
      nextActionOf(chargeId).then(function (a) {
        asking = false;
        if (a.status !== 'created' && a.status !== 'requires_action') {
          end({ type: 'nextAction', charge: { id: a.charge, status: a.status, failure_code: a.failure_code, authentication: a.authentication } });
          return;
        }
        if (a.challenge_url && !frame && !answered) {
          if (!httpURL(a.challenge_url)) {
            end({ type: 'error', error: failure('internal_error', 'The challenge page has no http or https address.') });
            return;
          }
          frame = showChallenge(a.challenge_url);
        } else if (!a.challenge_url && frame && !answered) {
          answered = true; // answered in another window, or voided: it settles now
          deadline = Date.now() + settleWithin;
        }
        if ((!frame || answered) && Date.now() > deadline) {
          end({ type: 'error', error: failure('timeout', 'The charge did not settle within ' + settleWithin / 1000 +
            ' seconds; ask your server for its status.') });
          return;
        }
        later();
      }, function (err) {
        asking = false;
        end({ type: 'error', error: err });
      });
    }
    // The challenge frame's done page (this origin) says the cardholder answered.
    function onChallengeDone(ev) {
      if (!frame || ev.origin !== window.location.origin || ev.source !== frame.contentWindow) { return; }
      var d = ev.data;
      if (!d || d.type !== 'gatehouse:challenge_done' || d.charge !== chargeId || answered) { return; }
      answered = true;
      deadline = Date.now() + settleWithin;
      if (!asking) {
        clearTimeout(timer);
        check();
      }
    }
    window.addEventListener('message', onChallengeDone);
    check();
  }

  window.addEventListener('message', function (ev) {
    if (ev.origin !== parentOrigin || ev.source !== window.parent) { return; }
    var d = ev.data;
    if (!d || d.target !== 'gatehouse-card') { return; }
    if (d.type === 'createToken') {
      createToken(String(d.requestId));
    } else if (d.type === 'handleNextAction' && typeof d.charge === 'string') {
      handleNextAction(String(d.requestId), d.charge);
    }
  });

  tell({ type: 'ready' });
})();
