// The browser journeys of api/openapi.yaml in a real browser: Debian's chromium driven by playwright-core.
// browser_test.go starts the stack and runs this once; it prints one JSON
// line with what each journey saw, and leaves a screenshot of each page.
//
//   node journeys.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, api2 (another replica), email, password, checkout, receiver, attackerSameSite,
// attackerCrossSite, shots}. The journeys, in order:
//   1. sign in to the dashboard;
//   2. create a key: its secret is shown once, and gone after a reload;
//   3. a checkout on another origin takes a card through the card field and
//      its server charges the token;
//   4. the charge appears in the dashboard as captured;
//   5. refund half of it;
//   6. refund.succeeded is in the events;
//   7. create a webhook endpoint, send a test delivery, see its attempt;
//   8. cross-site forms and framing are refused (the card field may be framed);
//   9. sign out; the old cookie is refused;
//  10. a checkout whose card needs authentication (3-D Secure): the issuer's
//      challenge shows inside the card field, the shopper completes it;
//  11. another checkout's shopper fails the challenge;
//  12. a checkout with a return_url: the browser goes to the issuer's page
//      and comes back to the merchant's return page;
//  13. a card saved in a checkout (customer and payment method from the
//      token), charged on session with the challenge completed, then charged
//      again off session by the merchant's server: 4000002500003155 is
//      captured, 4000002760003184 refused authentication_required;
//  14. the dashboard's customers (signed in again): a customer with two
//      saved cards, a 3-D Secure charge completed on the emulated issuer's
//      page that returns to the customer's page, an off-session renewal, a
//      charge that waits for the cardholder voided from its page; the
//      customers list, the customer's page, and a saved card deleted there;
//  15. the dashboard's connectors and routing: a sandbox connector and a
//      Stripe one made on the connectors page (the Stripe secret key never
//      shown back), the routing set to the server's sandbox then the new
//      one, the server's sandbox rehearsing a soft decline so that charges
//      move on, a refused routing shown with its message, and the
//      connectors' pages with their last 24 hours.
import { launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const card = '4242424242424242';
const out = { steps: {}, cardSentBy: [], pageErrors: [], consoleErrors: [], console: [] };
const { step, check, done } = steps(out);

const browser = await launch();

// expectedError is one console error a journey is about to cause on
// purpose (a form refused with 400): it is not counted, once.
let expectedError = null;

function watch(page, name) {
  page.on('pageerror', (e) => out.pageErrors.push(`${name}: ${e.message}`));
  page.on('console', (m) => {
    out.console.push(`${name} ${m.type()}: ${m.text()}`);
    if (m.type() === 'error' && expectedError && expectedError.test(m.text())) {
      expectedError = null;
      return;
    }
    // A refused frame is the clickjacking check working, not a page error.
    // Pages without an icon answer 404 for /favicon.ico.
    if (m.type() === 'error' && !/frame-ancestors|X-Frame-Options|403|401/.test(m.text()) && !/favicon\.ico$/.test(m.location().url || '')) {
      out.consoleErrors.push(`${name}: ${m.text()}`);
    }
  });
  page.on('dialog', (d) => d.accept());
}

// reloadUntil reloads the page until ok(page) holds or the time is up.
async function reloadUntil(page, ok, what, ms = 30000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await ok(page)) { return; }
    check(Date.now() < deadline, `${what} did not happen within ${ms} ms`);
    await page.waitForTimeout(400);
    await page.reload();
  }
}

const shot = (page, name) => page.screenshot({ path: `${cfg.shots}/${name}.png`, fullPage: true });

// The cards of the authentication journeys (sandbox test cards).
const cards3ds = { required: '4000002500003155', always: '4000002760003184' };
out.cardSentBy3ds = [];

// openCheckout opens the example checkout in a new page and types number
// into its card field; it returns the page and the card field.
async function openCheckout(context, name, number) {
  const p = await context.newPage();
  page = p; // where a failure is shown
  watch(p, name);
  p.on('request', (r) => {
    if (Object.values(cards3ds).some((n) => (r.postData() || '').includes(n) || r.url().includes(n))) {
      out.cardSentBy3ds.push({ frame: r.frame() === p.mainFrame() ? 'checkout' : 'card field', url: r.url() });
    }
  });
  await p.goto(cfg.checkout);
  const field = p.frameLocator('#card iframe');
  await field.locator('#number').fill(number);
  await field.locator('#exp').fill('12 / 34');
  await field.locator('#cvc').fill('123');
  return { p, field };
}

// settledText waits until the element's text no longer says it is under way
// (every such text ends with an ellipsis) and returns what it shows.
async function settledText(p, selector, ms = 30000) {
  await p.waitForFunction((sel) => {
    const t = document.querySelector(sel).textContent.trim();
    return t !== '' && !t.endsWith('…');
  }, selector, { timeout: ms });
  const el = p.locator(selector);
  return { text: (await el.textContent()).trim(), charge: await el.getAttribute('data-charge'), status: await el.getAttribute('data-status') };
}

const fieldHeight = (p) => p.evaluate(() => Math.round(document.querySelector('#card iframe').getBoundingClientRect().height));

// challengeInField pays on a new checkout with number, answers the
// challenge in the card field with button (complete or fail) and returns
// what the page showed. shotName names the screenshot of the challenge.
async function challengeInField(context, name, number, button, shotName, save = false) {
  const { p, field } = await openCheckout(context, name, number);
  if (save) { await p.check('#save'); }
  await p.click('#submit');
  const challenge = field.frameLocator('#challenge-frame');
  await challenge.locator(`[data-testid=${button}]`).waitFor({ timeout: 20000 });
  const seen = { heightDuring: await fieldHeight(p), formHidden: await field.locator('#card').isHidden() };
  if (shotName) { await shot(p, shotName); }
  await challenge.locator(`[data-testid=${button}]`).click();
  Object.assign(seen, await settledText(p, '#result'));
  seen.heightAfter = await fieldHeight(p);
  seen.fieldBack = await field.locator('#number').isVisible();
  return { p, seen };
}

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  page = await context.newPage();
  watch(page, 'dashboard');

  // 1. Sign in: the dashboard sends a stranger to the sign-in page.
  step('sign_in');
  await page.goto(`${cfg.api}/dashboard`);
  check(new URL(page.url()).pathname === '/dashboard/login', `/dashboard led to ${page.url()}`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await shot(page, 'dashboard-login');
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'gatehouse_session');
  check(session, 'no session cookie after signing in');
  out.sessionCookie = { httpOnly: session.httpOnly, sameSite: session.sameSite, secure: session.secure, path: session.path };

  // 2. A key: the secret is shown once, and a reload does not show it again.
  step('create_key');
  await page.goto(`${cfg.api}/dashboard/keys`);
  await page.fill('#key-name', 'browser journey');
  await Promise.all([page.waitForLoadState('load'), page.click('#create-key button[type=submit]')]);
  await page.waitForSelector('#secret-key');
  const secret = (await page.textContent('#secret-key')).trim();
  check(/^sk_test_/.test(secret), `the new key's secret reads ${secret.slice(0, 8)}...`);
  out.keyShown = true;
  await shot(page, 'dashboard-key-created');
  await page.reload();
  out.secretAfterReload = (await page.locator('#secret-key').count()) > 0 || (await page.content()).includes(secret);
  out.keyListed = (await page.locator('#keys tr', { hasText: 'browser journey' }).count()) === 1;
  await shot(page, 'dashboard-keys');

  // 3. The checkout on its own origin: the card goes into the card field only.
  step('checkout');
  const shop = await context.newPage();
  watch(shop, 'checkout');
  shop.on('request', (r) => {
    if ((r.postData() || '').includes(card) || r.url().includes(card)) {
      out.cardSentBy.push({ frame: r.frame() === shop.mainFrame() ? 'checkout' : 'card field', url: r.url() });
    }
  });
  await shop.goto(cfg.checkout);
  const field = shop.frameLocator('iframe');
  await field.locator('#number').fill(card);
  await field.locator('#exp').fill('12 / 34');
  await field.locator('#cvc').fill('123');
  await shot(shop, 'checkout-filled');
  await shop.click('#submit');
  await shop.waitForFunction(() => document.querySelector('#result').dataset.charge || /rror|not|could/.test(document.querySelector('#result').textContent), null, { timeout: 20000 });
  out.checkoutResult = await shop.textContent('#result');
  out.charge = await shop.getAttribute('#result', 'data-charge');
  out.pageReadsField = await shop.evaluate(() => {
    try { return document.querySelector('iframe').contentDocument !== null; } catch { return false; }
  });
  await shot(shop, 'checkout-paid');
  check(out.charge, `the checkout shows ${out.checkoutResult}`);

  // 4. The charge in the dashboard, captured by the worker.
  step('charge_captured');
  await page.goto(`${cfg.api}/dashboard/charges/${out.charge}`);
  await reloadUntil(page, async (p) => (await p.getAttribute('#charge-status', 'data-status')) === 'captured', 'the capture');
  await page.goto(`${cfg.api}/dashboard/charges?status=captured`);
  out.listedAsCaptured = (await page.locator(`#charges tr[data-charge="${out.charge}"] [data-status="captured"]`).count()) === 1;
  await shot(page, 'dashboard-charges');

  // 5. Refund half of it.
  step('refund_half');
  await page.click(`#charges tr[data-charge="${out.charge}"] a >> nth=0`);
  await page.waitForSelector('#refund');
  await page.fill('#refund-amount', '10.00');
  await page.selectOption('#refund-reason', 'requested_by_customer');
  await Promise.all([page.waitForURL('**notice=refund'), page.click('#refund button[type=submit]')]);
  out.refundNotice = (await page.textContent('#notice')).trim();
  await reloadUntil(page, async (p) => (await p.locator('#refunds [data-status="succeeded"]').count()) === 1, 'the refund');
  out.refunded = (await page.textContent('#charge-refunded')).trim();
  await shot(page, 'dashboard-charge');

  // 6. refund.succeeded in the events.
  step('events');
  await page.goto(`${cfg.api}/dashboard/events?type=refund.succeeded`);
  out.refundSucceededEvents = await page.locator('#events tr[data-event-type="refund.succeeded"]').count();
  await shot(page, 'dashboard-events');
  await page.click('#events tr[data-event-type="refund.succeeded"] a >> nth=0');
  out.eventNamesCharge = (await page.textContent('#event-body')).includes(out.charge);
  await shot(page, 'dashboard-event');

  // 7. An endpoint, a test delivery, and its attempt in the log.
  step('webhook');
  await page.goto(`${cfg.api}/dashboard/webhooks`);
  await page.fill('#endpoint-url', cfg.receiver);
  await page.fill('#endpoint-description', 'browser journey');
  await Promise.all([page.waitForLoadState('load'), page.click('#create-endpoint button[type=submit]')]);
  await page.waitForSelector('#webhook-secret');
  out.endpointSecretShown = /^whsec_/.test((await page.textContent('#webhook-secret')).trim());
  out.endpoint = (await page.textContent('#endpoint-id')).trim();
  await Promise.all([page.waitForURL('**notice=test'), page.click('#send-test button[type=submit]')]);
  await reloadUntil(page, async (p) => (await p.locator('#deliveries .delivery[data-status="succeeded"] .attempt', { hasText: 'HTTP 200' }).count()) >= 1, 'the test delivery');
  await page.click('#recover-preview');
  await page.waitForSelector('#notice');
  out.recoverPreview = (await page.textContent('#notice')).trim();
  await shot(page, 'dashboard-webhook');
  await page.goto(`${cfg.api}/dashboard/webhooks`);
  out.endpointListed = (await page.locator(`#endpoints tr[data-endpoint="${out.endpoint}"]`).count()) === 1;
  await shot(page, 'dashboard-webhooks');

  // 8. A cross-site form and framing. The attacker pages post a form to
  // the dashboard (with the victim's cookie, if the browser sends it) and
  // frame both the dashboard and the card field.
  step('csrf_and_framing');
  out.csrf = {};
  for (const [name, url] of [['same_site', cfg.attackerSameSite], ['cross_site', cfg.attackerCrossSite]]) {
    const evil = await context.newPage();
    watch(evil, `attacker ${name}`);
    const answer = evil.waitForResponse((r) => r.url().startsWith(`${cfg.api}/dashboard/keys`) && r.request().method() === 'POST');
    await evil.goto(`${url}/csrf?target=${encodeURIComponent(cfg.api + '/dashboard/keys')}`);
    const r = await answer;
    out.csrf[name] = r.status();
    await evil.waitForLoadState('load');
    if (name === 'same_site') { await shot(evil, 'dashboard-csrf-refused'); }
    await evil.close();
  }
  const framer = await context.newPage();
  watch(framer, 'framer');
  await framer.goto(`${cfg.attackerSameSite}/frame?dashboard=${encodeURIComponent(cfg.api + '/dashboard/charges')}&card=${encodeURIComponent(cfg.api + '/elements/v1/card')}`);
  await framer.waitForLoadState('load');
  await framer.waitForTimeout(300);
  const frames = framer.frames();
  const dash = frames.find((f) => f.name() === 'dashboard');
  const cardFrame = frames.find((f) => f.name() === 'card');
  out.dashboardFramed = dash ? await dash.evaluate(() => !!document.querySelector('#charges')).catch(() => false) : false;
  out.cardFramed = cardFrame ? await cardFrame.evaluate(() => !!document.querySelector('#number')).catch(() => false) : false;
  await shot(framer, 'dashboard-framing-refused');
  await framer.close();
  await page.goto(`${cfg.api}/dashboard/keys`);
  out.attackKeyListed = (await page.locator('#keys tr', { hasText: 'csrf attack' }).count()) > 0;

  // 9. Sign out; the cookie it had is refused afterwards, by every replica.
  step('sign_out');
  const before = await context.request.get(`${cfg.api2}/dashboard/charges`, { maxRedirects: 0 });
  out.otherReplicaBeforeSignOut = before.status();
  const old = (await context.cookies()).find((c) => c.name === 'gatehouse_session');
  await Promise.all([page.waitForURL('**/dashboard/login?notice=signed_out'), page.click('#sign-out')]);
  out.signedOutNotice = (await page.textContent('#notice')).trim();
  await shot(page, 'dashboard-signed-out');
  const replay = await browser.newContext();
  await replay.addCookies([old]);
  const again = await replay.newPage();
  watch(again, 'old cookie');
  const res = await again.goto(`${cfg.api}/dashboard/charges`);
  out.oldCookieLandsOn = new URL(again.url()).pathname;
  out.oldCookieStatus = res.status();
  const direct = await replay.request.get(`${cfg.api}/dashboard/charges`, { maxRedirects: 0 });
  out.oldCookieDirect = { status: direct.status(), location: direct.headers().location || '' };
  // Refused by the other replica too (cookies are not bound to a port).
  const other = await replay.request.get(`${cfg.api2}/dashboard/charges`, { maxRedirects: 0 });
  out.oldCookieOtherReplica = { status: other.status(), location: other.headers().location || '' };
  const post = await replay.request.post(`${cfg.api}/dashboard/keys`, { form: { name: 'after sign out' }, maxRedirects: 0 });
  out.oldCookiePost = post.status();
  await replay.close();

  // 10. The issuer asks the cardholder to authenticate: the challenge shows
  // in the card field, which grows to fit it; the shopper completes it.
  step('challenge_complete');
  const shopper = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const complete = await challengeInField(shopper, 'challenge complete', cards3ds.required, 'complete', 'checkout-challenge');
  out.challengeComplete = complete.seen;
  await shot(complete.p, 'checkout-challenge-paid');

  // 11. Another checkout: the shopper fails the challenge.
  step('challenge_fail');
  const fail = await challengeInField(shopper, 'challenge fail', cards3ds.always, 'fail', '');
  out.challengeFail = fail.seen;
  await shot(fail.p, 'checkout-challenge-failed');

  // 12. With a return_url: the issuer's page in the browser's own window,
  // then back to the merchant's return page with ?charge=<id>.
  step('redirect');
  const { p: away } = await openCheckout(shopper, 'redirect', cards3ds.required);
  await Promise.all([away.waitForURL(`${cfg.api}/authenticate/v1/**`, { timeout: 20000 }), away.click('#submit-redirect')]);
  out.redirect = { challengeURL: away.url() };
  await shot(away, 'redirect-challenge');
  await Promise.all([away.waitForURL(`${cfg.checkout}return?charge=*`), away.click('[data-testid=complete]')]);
  out.redirect.returnURL = away.url();
  Object.assign(out.redirect, await settledText(away, '#result'));
  await shot(away, 'redirect-returned');

  // 13. Saved cards, charged again off session by the merchant's server.
  step('saved_card');
  for (const [name, number, shotName] of [['savedRequired', cards3ds.required, 'saved-card-again'], ['savedAlways', cards3ds.always, 'saved-card-again-refused']]) {
    const saved = await challengeInField(shopper, name, number, 'complete', '', true);
    await saved.p.locator('#again').click();
    saved.seen.again = await settledText(saved.p, '#again-result');
    out[name] = saved.seen;
    await shot(saved.p, shotName);
  }
  await shopper.close();

  // 14. The dashboard's customers, signed in again. The customer and its
  // cards are made with the secret key of step 2.
  step('customers');
  const merchant = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  page = await merchant.newPage();
  watch(page, 'customers');
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);
  const api = async (method, path, data) => {
    const r = await merchant.request.fetch(`${cfg.api}${path}`, { method, data, headers: { Authorization: `Bearer ${secret}` } });
    const body = await r.json();
    check(r.ok(), `${method} ${path} answered ${r.status()} ${body.error ? body.error.code : ''}`);
    return body;
  };
  const chargeOf = async (id, ok, what) => {
    const deadline = Date.now() + 30000;
    for (;;) {
      const c = await api('GET', `/v1/charges/${id}`);
      if (ok(c)) { return c; }
      check(c.status !== 'failed' && Date.now() < deadline, `${what}: the charge is ${c.status} ${c.failure_code || ''}`);
      await page.waitForTimeout(200);
    }
  };
  const cus = await api('POST', '/v1/customers', { email: 'ada@example.com', name: 'Ada Lovelace', description: 'Pro plan, billed yearly', metadata: { plan: 'pro' } });
  const saveCard = (number) => api('POST', `/v1/customers/${cus.id}/payment_methods`,
    { card: { number, exp_month: 12, exp_year: new Date().getFullYear() + 3, cvc: '123' } });
  const secure = await saveCard(cards3ds.required);
  const spare = await saveCard('5555555555554444');
  const chargeSaved = (extra) => api('POST', '/v1/charges',
    { amount: 9900, currency: 'usd', payment_method: 'card', customer: cus.id, card: { payment_method: secure.id }, ...extra });
  // The first charge: the cardholder completes the challenge on the
  // emulated issuer's page, which returns to return_url (the customer's page).
  const first = await chargeSaved({ description: 'Pro plan, first year', return_url: `${cfg.api}/dashboard/customers/${cus.id}` });
  const waiting = await chargeOf(first.id, (c) => c.status === 'requires_action', 'the challenge');
  out.customers = { nextAction: waiting.next_action.type };
  await page.goto(waiting.next_action.redirect_to_url.url);
  await Promise.all([
    page.waitForURL((u) => u.pathname === `/dashboard/customers/${cus.id}` && u.searchParams.get('charge') === first.id),
    page.click('[data-testid=complete]'),
  ]);
  out.customers.afterChallenge = (await chargeOf(first.id, (c) => c.status !== 'requires_action', 'the answer')).status;
  // The renewal, off session: the card was authenticated, so no challenge.
  const renewal = await chargeSaved({ description: 'Pro plan, renewal', off_session: true });
  out.customers.offSession = (await chargeOf(renewal.id, (c) => c.status !== 'created', 'the renewal')).status;
  // A charge that waits for the cardholder, voided from its page.
  const upgrade = await chargeSaved({ description: 'Upgrade to Team', amount: 4900 });
  await chargeOf(upgrade.id, (c) => c.status === 'requires_action', 'the upgrade\'s challenge');
  await page.goto(`${cfg.api}/dashboard/charges/${upgrade.id}`);
  out.customers.pendingShown = (await page.getAttribute('#charge-authentication', 'data-authentication')) === 'pending';
  await Promise.all([page.waitForURL('**notice=void'), page.click('#void button[type=submit]')]);
  await reloadUntil(page, async (p) => (await p.getAttribute('#charge-status', 'data-status')) === 'voided', 'the void');
  out.customers.voided = true;
  // The customers list, filtered by email in another case, and the page.
  await page.goto(`${cfg.api}/dashboard/customers?email=ADA%40example.com`);
  out.customers.listed = await page.locator('#customers tr[data-customer]').count();
  await shot(page, 'dashboard-customers');
  await page.click(`#customers tr[data-customer="${cus.id}"] a >> nth=0`);
  await page.waitForSelector('#cards');
  out.customers.cards = await page.locator('#cards tr[data-payment-method]').count();
  out.customers.authenticated = [
    await page.getAttribute(`#cards tr[data-payment-method="${secure.id}"] [data-authenticated]`, 'data-authenticated'),
    await page.getAttribute(`#cards tr[data-payment-method="${spare.id}"] [data-authenticated]`, 'data-authenticated'),
  ];
  out.customers.charges = await page.locator('#charges tr[data-charge]').count();
  await shot(page, 'dashboard-customer');
  // Delete the spare card (the page asks first; the dialog is accepted).
  await Promise.all([page.waitForURL('**notice=card_deleted'),
    page.click(`#cards tr[data-payment-method="${spare.id}"] button[type=submit]`)]);
  out.customers.cardDeleted = (await page.locator(`#cards tr[data-payment-method="${spare.id}"]`).count()) === 0;

  // 15. Connectors and routing, in the same session.
  step('connectors');
  const conn = {};
  out.connectors = conn;
  // A made-up Stripe key: it is typed into the form and must never come
  // back, in a page or anywhere the stack's secret scan looks.
  const stripeKey = 'sk_test_' + [...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, '0')).join('');
  const keyShown = async () => (await page.content()).includes(stripeKey.slice(8));
  await page.goto(`${cfg.api}/dashboard/connectors`);
  const server = await page.getAttribute('#connectors tr[data-connector]:has-text("server account")', 'data-connector');
  check(server, 'no server account in the connectors list');
  await page.selectOption('#connector-provider', 'sandbox');
  await page.fill('#connector-name', 'Backup sandbox');
  await page.fill('#rehearsal-latency', '40');
  await Promise.all([page.waitForURL('**notice=conn_created'), page.click('#create-connector button[type=submit]')]);
  const backup = (await page.textContent('#connector-id')).trim();
  await page.goto(`${cfg.api}/dashboard/connectors`);
  await page.selectOption('#connector-provider', 'stripe');
  await page.fill('#connector-name', 'Stripe EU account');
  await page.fill('#connector-secret', stripeKey);
  await Promise.all([page.waitForURL('**notice=conn_created'), page.click('#create-connector button[type=submit]')]);
  const stripe = (await page.textContent('#connector-id')).trim();
  conn.keyShown = await keyShown();
  // No account stands behind the made-up key: disable it from the list.
  await page.goto(`${cfg.api}/dashboard/connectors`);
  await Promise.all([page.waitForURL('**notice=conn_disabled'),
    page.click(`#connectors tr[data-connector="${stripe}"] .toggle-connector button`)]);
  conn.keyShown = conn.keyShown || await keyShown();
  conn.listed = await page.locator('#connectors tr[data-connector]').count();
  conn.stripeEnabled = await page.getAttribute(`#connectors tr[data-connector="${stripe}"] [data-enabled]`, 'data-enabled');

  // The routing: the server's sandbox first, the new one after it.
  await page.goto(`${cfg.api}/dashboard/routing`);
  await page.selectOption('#ordered-0', server);
  await page.selectOption('#ordered-1', backup);
  await Promise.all([page.waitForURL('**notice=routing_saved'), page.click('#routing-ordered button[type=submit]')]);
  const named = (p) => p.locator('#default-route li[data-connector]').evaluateAll((els) => els.map((e) => e.dataset.connector));
  conn.route = (await named(page)).map((id) => (id === server ? 'server' : id === backup ? 'backup' : id));
  // A routing that names no connector of the merchant's is refused, with
  // the service's message, and the JSON stays in its field.
  await page.fill('#routing-text', JSON.stringify({ default: { connectors: ['conn_' + '0'.repeat(26)] } }, null, 2));
  expectedError = /status of 400/;
  await Promise.all([page.waitForResponse((r) => r.url() === `${cfg.api}/dashboard/routing` && r.request().method() === 'POST'),
    page.click('#routing-json button[type=submit]')]);
  await page.waitForSelector('#error');
  conn.refused = (await page.textContent('#error strong')).trim();
  conn.refusedKept = (await page.inputValue('#routing-text')).includes('conn_' + '0'.repeat(26));
  await shot(page, 'dashboard-routing-refused');
  await page.goto(`${cfg.api}/dashboard/routing`);
  conn.routeAfterRefusal = (await named(page)).length;
  await shot(page, 'dashboard-routing');

  // The server's sandbox answers slowly, then declines with
  // processing_error: those charges move on to the backup.
  const rehearse = async (id, latency, decline) => {
    await page.goto(`${cfg.api}/dashboard/connectors/${id}`);
    await page.fill('#rehearsal-latency', String(latency));
    await page.selectOption('#rehearsal-decline', decline);
    await Promise.all([page.waitForURL('**notice=rehearsal_saved'), page.click('#rehearsal button[type=submit]')]);
    await page.waitForTimeout(1500); // the worker reads a connector again within a second
  };
  const pay = async (n, description) => {
    const made = [];
    for (let i = 0; i < n; i++) {
      made.push(await api('POST', '/v1/charges', { amount: 2500 + 100 * i, currency: 'usd', payment_method: 'card', description,
        card: { number: card, exp_month: 12, exp_year: new Date().getFullYear() + 2, cvc: '123' } }));
    }
    return Promise.all(made.map((c) => chargeOf(c.id, (x) => x.status === 'captured', description)));
  };
  const path = (c) => c.attempts.map((a) => `${a.connector === server ? 'server' : a.connector === backup ? 'backup' : a.connector}:${a.status}${a.failure_code ? ':' + a.failure_code : ''}`).join(' ');
  await rehearse(server, 80, '');
  conn.direct = (await pay(4, 'Routed to the server sandbox')).map(path);
  await rehearse(server, 80, 'processing_error');
  conn.movedOn = (await pay(3, 'Moved on after processing_error')).map(path);

  // The connectors' pages against the charges' attempts through the API.
  const all = (await api('GET', '/v1/charges?limit=100')).data;
  const expect = (id) => {
    const e = { attempts: 0, succeeded: 0, failed: 0, failures: {} };
    for (const c of all) {
      for (const a of c.attempts) {
        if (a.connector !== id) { continue; }
        e.attempts++;
        if (a.status === 'succeeded') { e.succeeded++; }
        if (a.status === 'failed') { e.failed++; e.failures[a.failure_code || ''] = (e.failures[a.failure_code || ''] || 0) + 1; }
      }
    }
    return e;
  };
  const seen = async (id) => {
    await page.goto(`${cfg.api}/dashboard/connectors/${id}`);
    const stats = page.locator('#stats');
    const failures = {};
    for (const row of await page.locator('#failures tr[data-failure-code]').all()) {
      failures[await row.getAttribute('data-failure-code')] = Number((await row.locator('td.num').textContent()).trim());
    }
    return {
      attempts: Number(await stats.getAttribute('data-attempts')), succeeded: Number(await stats.getAttribute('data-succeeded')),
      failed: Number(await stats.getAttribute('data-failed')), failures,
      rate: (await page.textContent('#stat-rate')).trim(), p50: (await page.textContent('#stat-p50')).trim(), p99: (await page.textContent('#stat-p99')).trim(),
    };
  };
  conn.backup = { seen: await seen(backup), want: expect(backup) };
  conn.server = { seen: await seen(server), want: expect(server) };
  await shot(page, 'dashboard-connector');
  await page.goto(`${cfg.api}/dashboard/connectors`);
  conn.keyShown = conn.keyShown || await keyShown();
  await shot(page, 'dashboard-connectors');
  await merchant.close();
  step('done');
} catch (e) {
  out.error = String(e && e.stack || e);
  if (page) {
    // Where it stopped: the page's address, its alert, and a screenshot.
    out.failedAt = page.url();
    out.failedAlert = await page.locator('[role=alert]').allTextContents().catch(() => []);
    await shot(page, 'failure').catch(() => {});
  }
} finally {
  await browser.close();
}
done();
console.log(JSON.stringify(out));
