// The merchant's own script: it mounts Gatehouse's card field, asks it for a
// token, and sends only the token to the merchant's server.
(function () {
  'use strict';
  var form = document.getElementById('pay');
  var result = document.getElementById('result');
  var button = document.getElementById('submit');
  var gatehouse = Gatehouse(form.dataset.publicKey);
  gatehouse.mountCard('#card');

  form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    button.disabled = true;
    result.textContent = 'Paying…';
    gatehouse.createToken().then(function (token) {
      return fetch('/pay', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: token.id, order: '1042' })
      }).then(function (res) { return res.json(); });
    }).then(function (charge) {
      if (charge.error) { throw new Error(charge.error.message || charge.error); }
      result.textContent = 'Paid: charge ' + charge.id + ' (' + charge.status + ')';
      result.dataset.charge = charge.id;
    }).catch(function (err) {
      result.textContent = err.message;
      button.disabled = false;
    });
  });
})();
