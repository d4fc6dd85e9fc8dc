// gatehouse.js: the card field for a merchant's checkout page.
//
//   <script src="https://GATEWAY/js/v1/gatehouse.js"></script>
//   var gatehouse = Gatehouse('pk_test_...');
//   gatehouse.mountCard('#card');               // the gateway's own field, framed
//   gatehouse.createToken().then(function (token) {
//     // send token.id to your server, which charges it with the secret key:
//     // POST /v1/charges {"card": {"token": token.id}, ...}
//   });
//   // A charge in requires_action with next_action use_gatehouse_js: the
//   // card field shows the issuer's challenge and resolves once it settled.
//   gatehouse.handleNextAction(chargeId).then(function (result) {
//     // result.charge: {id, status, failure_code, authentication}
//   });
//
// The card number is typed into the gateway's page (GET /elements/v1/card),
// never into the merchant's, and the challenge is shown inside that page.
// Messages go only to the gateway's origin and are accepted only from the
// framed field.
(function (global) {
  'use strict';
  var script = document.currentScript;
  var gatewayOrigin = script && script.src ? new URL(script.src).origin : '';

  function Gatehouse(publicKey) {
    if (!(this instanceof Gatehouse)) { return new Gatehouse(publicKey); }
    if (typeof publicKey !== 'string' || publicKey.indexOf('pk_') !== 0) {
      throw new Error('Gatehouse: pass your public key (pk_test_...), never a secret key.');
    }
    if (!gatewayOrigin) {
      throw new Error('Gatehouse: load gatehouse.js with a <script src> from the gateway.');
    }
    this._key = publicKey;
    this._frame = null;
    this._ready = false;
    this._waiting = [];
    this._pending = {};
    this._seq = 0;
    var self = this;
    global.addEventListener('message', function (ev) {
      if (ev.origin !== gatewayOrigin || !self._frame || ev.source !== self._frame.contentWindow) { return; }
      var d = ev.data;
      if (!d || d.source !== 'gatehouse-card') { return; }
      if (d.type === 'ready') {
        self._ready = true;
        var waiting = self._waiting;
        self._waiting = [];
        waiting.forEach(function (send) { send(); });
        return;
      }
      if (d.type === 'resize') {
        self._resize(d.height);
        return;
      }
      var p = self._pending[d.requestId];
      if (!p) { return; }
      delete self._pending[d.requestId];
      if (d.type === 'token') {
        p.resolve(d.token);
        return;
      }
      if (d.type === 'nextAction') {
        p.resolve({ charge: d.charge });
        return;
      }
      var e = d.error || {};
      var err = new Error(e.message || p.fallback);
      err.code = e.code;
      err.param = e.param;
      p.reject(err);
    });
  }

  var fieldHeight = 170;

  // _resize sets the card field's height: height pixels while it shows a
  // challenge, its own height again when height is null.
  Gatehouse.prototype._resize = function (height) {
    if (!this._frame) { return; }
    var h = typeof height === 'number' && isFinite(height) ? Math.min(Math.max(height, 100), 1000) : fieldHeight;
    this._frame.style.height = h + 'px';
  };

  // _ask sends a request to the card field once it is ready; the promise
  // settles with its answer.
  Gatehouse.prototype._ask = function (message, fallback) {
    var self = this;
    return new Promise(function (resolve, reject) {
      if (!self._frame) {
        reject(new Error('Gatehouse: call mountCard() first.'));
        return;
      }
      var id = String(++self._seq);
      self._pending[id] = { resolve: resolve, reject: reject, fallback: fallback };
      message.target = 'gatehouse-card';
      message.requestId = id;
      var send = function () {
        self._frame.contentWindow.postMessage(message, gatewayOrigin);
      };
      if (self._ready) { send(); } else { self._waiting.push(send); }
    });
  };

  // mountCard frames the card field into target (an element or a selector)
  // and returns the iframe.
  Gatehouse.prototype.mountCard = function (target) {
    var el = typeof target === 'string' ? document.querySelector(target) : target;
    if (!el) { throw new Error('Gatehouse: mountCard: no element ' + target); }
    var f = document.createElement('iframe');
    f.src = gatewayOrigin + '/elements/v1/card?key=' + encodeURIComponent(this._key) +
      '&origin=' + encodeURIComponent(global.location.origin);
    f.title = 'Secure card payment input';
    f.setAttribute('scrolling', 'no');
    f.style.border = '0';
    f.style.width = '100%';
    f.style.height = fieldHeight + 'px';
    el.appendChild(f);
    this._frame = f;
    this._ready = false;
    return f;
  };

  // createToken resolves to the token object of POST /v1/tokens, or rejects
  // with an Error whose code and param are the API's.
  Gatehouse.prototype.createToken = function () {
    return this._ask({ type: 'createToken' }, 'The card could not be tokenized.');
  };

  // handleNextAction lets the cardholder authenticate a charge made from a
  // token of this card field (next_action use_gatehouse_js): the field
  // shows the issuer's challenge and grows to fit it, then waits until the
  // charge settles. It resolves to {charge: {id, status, failure_code,
  // authentication}} once the charge no longer requires action (at once if
  // it needs none), or rejects with an Error whose code and message say why.
  Gatehouse.prototype.handleNextAction = function (chargeId) {
    if (typeof chargeId !== 'string' || chargeId === '') {
      return Promise.reject(new Error('Gatehouse: handleNextAction: pass the id of the charge.'));
    }
    return this._ask({ type: 'handleNextAction', charge: chargeId }, 'The charge could not be authenticated.');
  };

  global.Gatehouse = Gatehouse;
})(window);
