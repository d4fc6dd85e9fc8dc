// The merchant's own script. On the checkout page it mounts Gatehouse's card
// field, asks it for a token and sends only the token to the merchant's
// server; if the card's issuer asks the cardholder to authenticate, the card
// field shows the challenge, or the browser goes to the issuer's page. On the
// return page (/return?charge=...) it shows how the payment ended.
(function () {
  'use strict';
  var result = document.getElementById('result');

  function json(res) {
    return res.json().then(function (body) {
      if (body.error) { throw new Error(body.error.message || 'The payment failed.'); }
      return body;
    });
  }

  function post(path, body) {
    return fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body)
    }).then(json);
  }

  // reread asks the merchant's server for the charge (it reads it with the secret key).
  function reread(id) {
    return fetch('/charges/' + encodeURIComponent(id)).then(json);
  }

  function settled(charge) {
    return charge.status !== 'created' && charge.status !== 'requires_action';
  }

  function show(el, charge) {
    el.dataset.charge = charge.id;
    el.dataset.status = charge.status;
    if (charge.status === 'captured' || charge.status === 'authorized') {
      el.textContent = 'Paid: charge ' + charge.id + ' (' + charge.status + ')';
    } else if (charge.status === 'failed') {
      el.textContent = 'Payment failed: charge ' + charge.id + ' (' + charge.failure_code + ')';
    } else {
      el.textContent = 'Charge ' + charge.id + ' is ' + charge.status;
    }
  }

  // The return page: poll the server until the issuer's answer settled the charge.
  function returned() {
    var id = new URLSearchParams(window.location.search).get('charge');
    if (!id) {
      result.textContent = 'The address names no charge.';
      return;
    }
    var deadline = Date.now() + 30000;
    (function poll() {
      reread(id).then(function (charge) {
        if (!settled(charge) && Date.now() < deadline) {
          setTimeout(poll, 500);
          return;
        }
        show(result, charge);
      }).catch(function (err) { result.textContent = err.message; });
    })();
  }

  function checkout() {
    var form = document.getElementById('pay');
    var buttons = form.querySelectorAll('button');
    var saved = document.getElementById('saved');
    var gatehouse = Gatehouse(form.dataset.publicKey);
    gatehouse.mountCard('#card');

    function enable(on) {
      Array.prototype.forEach.call(buttons, function (b) { b.disabled = !on; });
    }

    // authenticate lets the cardholder answer the issuer, if it asks.
    function authenticate(charge) {
      var next = charge.next_action;
      if (charge.status !== 'requires_action' || !next) { return charge; }
      if (next.type === 'redirect_to_url') {
        window.location.assign(next.redirect_to_url.url); // back at /return?charge=...
        return new Promise(function () {});
      }
      result.textContent = 'Your bank asks you to confirm the payment…';
      return gatehouse.handleNextAction(charge.id).then(function () { return reread(charge.id); });
    }

    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      var redirect = !!(ev.submitter && ev.submitter.dataset.redirect);
      var save = document.getElementById('save').checked;
      enable(false);
      result.textContent = 'Paying…';
      gatehouse.createToken().then(function (token) {
        return post('/pay', { token: token.id, order: '1042', redirect: redirect, save: save });
      }).then(authenticate).then(function (charge) {
        show(result, charge);
        if (charge.status === 'failed') { enable(true); }
        saved.hidden = !(charge.customer && charge.status === 'captured');
        saved.dataset.customer = charge.customer || '';
      }).catch(function (err) {
        result.textContent = err.message;
        enable(true);
      });
    });

    var again = document.getElementById('again');
    again.addEventListener('click', function () {
      var out = document.getElementById('again-result');
      again.disabled = true;
      out.textContent = 'Charging…';
      post('/charge-again', { customer: saved.dataset.customer }).then(function (charge) {
        show(out, charge);
      }).catch(function (err) { out.textContent = err.message; }).then(function () { again.disabled = false; });
    });
  }

  if (document.getElementById('pay')) { checkout(); } else { returned(); }
})();
