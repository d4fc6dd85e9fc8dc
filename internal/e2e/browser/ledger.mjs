// The dashboard's books (docs/ledger.md, "The dashboard") in a real
// browser: Debian's chromium driven by playwright-core. browser_ledger_test.go
// starts the stack with time compressed, makes real captures and runs this
// once; it prints one JSON line with what the journey saw, and leaves a
// screenshot of each page.
//
//   node ledger.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, email, password, shots}. The journey: sign in; on the
// Balance page, wait for the EUR captures to become available, read the
// balances and each currency's chart; on the Payouts page, ask for more
// than the available EUR (refused, 409, on the page), then pay out half of
// it and see that payout paid; see the daily schedule's USD payout paid and
// open it: what it paid out, and that their net sums to its amount.
import { dashboardPage, launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { steps: {}, pageErrors: [], consoleErrors: [], available: {}, pending: {}, chart: {}, refused: {}, manual: {}, automatic: {} };
const { step, check, done } = steps(out);

const browser = await launch();
const { page, shot, expectError, failed } = await dashboardPage(browser, out, cfg.shots);

// reloadUntil reloads the page until ok() holds or the time is up.
async function reloadUntil(ok, what, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await ok()) { return; }
    check(Date.now() < deadline, `${what} did not happen within ${ms} ms`);
    await page.waitForTimeout(500);
    await page.reload();
  }
}

// number reads a numeric attribute of the first element the selector
// finds, null when there is none.
async function number(selector, attr) {
  const el = await page.$(selector);
  return el ? Number(await el.getAttribute(attr)) : null;
}

// major renders minor units of a two-digit currency as the form takes them.
const major = (n) => (n / 100).toFixed(2);

try {
  step('sign_in');
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);
  out.navLinks = await page.$$eval('nav[aria-label=Sections] a', (els) => els.map((a) => a.getAttribute('href')));

  step('balance');
  await Promise.all([page.waitForURL('**/dashboard/balance'), page.click('nav a[href="/dashboard/balance"]')]);
  out.moneyLinks = await page.$$eval('nav[aria-label=Money] a', (els) => els.map((a) => a.getAttribute('href')));
  // The EUR connector pays out by hand only: once its captures are
  // available, all of its balance is.
  await reloadUntil(async () => (await number('#balances [data-currency="EUR"]', 'data-pending')) === 0 &&
    (await number('#balances [data-currency="EUR"]', 'data-available')) > 0, 'the EUR captures becoming available', 30000);
  for (const el of await page.$$('#balances [data-currency]')) {
    const cur = await el.getAttribute('data-currency');
    out.available[cur] = Number(await el.getAttribute('data-available'));
    out.pending[cur] = Number(await el.getAttribute('data-pending'));
  }
  const chartSums = async () => {
    const total = page.locator('#days-total');
    const bars = await page.$$eval('svg.chart rect.bar', (els) => els.map((e) => [e.classList[1], Number(e.dataset.amount)]));
    const sum = (kind) => bars.filter(([k]) => k === kind).reduce((s, [, v]) => s + v, 0);
    const sums = { captures: Number(await total.getAttribute('data-captures')), gross: sum('gross'), fees: sum('fees'), net: sum('net'), bars: bars.length };
    check(sums.gross === Number(await total.getAttribute('data-gross')) && sums.net === Number(await total.getAttribute('data-net')),
      'the bars and the table disagree');
    return sums;
  };
  out.chartCurrency = await page.getAttribute('#chart', 'data-currency');
  out.chartTitle = (await page.textContent('svg.chart > title')).trim();
  out.chart[out.chartCurrency] = await chartSums();
  await shot(page, 'balance');
  for (const tab of await page.$$eval('nav.tabs a:not([aria-current])', (els) => els.map((a) => a.getAttribute('href')))) {
    await page.goto(`${cfg.api}${tab}`);
    out.chart[await page.getAttribute('#chart', 'data-currency')] = await chartSums();
  }

  step('refused');
  await Promise.all([page.waitForURL('**/dashboard/payouts'), page.click('nav a[href="/dashboard/payouts"]')]);
  const eur = await page.$eval('#payout-account', (s) => [...s.options].map((o) => o.value).find((v) => v.endsWith('/EUR')));
  check(eur, 'the form offers no EUR account');
  await page.selectOption('#payout-account', eur);
  await page.fill('#payout-amount', major(out.available.EUR + 100));
  expectError(/status of 409/);
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url() === `${cfg.api}/dashboard/payouts` && r.request().method() === 'POST'),
    page.click('#payout-form button[type=submit]')]);
  await page.waitForSelector('#error');
  out.refused = { status: refused.status(), message: (await page.textContent('#error strong')).trim(), kept: await page.inputValue('#payout-amount') };
  await shot(page, 'payout-refused');

  step('manual');
  await page.selectOption('#payout-account', eur);
  await page.fill('#payout-amount', major(Math.floor(out.available.EUR / 2)));
  await page.fill('#payout-description', 'Weekly transfer');
  await Promise.all([page.waitForURL('**notice=payout_created'), page.click('#payout-form button[type=submit]')]);
  out.manual.id = (await page.textContent('#payout-id')).trim();
  out.manual.notice = (await page.textContent('#notice')).trim();
  out.manual.amount = await number('#payout-heading', 'data-amount');
  out.manual.made = await page.getAttribute('#payout-made', 'data-automatic');
  // The page reloads itself while the payout is on its way.
  await page.waitForSelector('#payout-status[data-status="paid"]', { timeout: 30000 });
  out.manual.status = await page.getAttribute('#payout-status', 'data-status');
  await shot(page, 'payout-manual');

  step('automatic');
  await page.goto(`${cfg.api}/dashboard/payouts`);
  const paidAutomatic = '#payouts tr[data-status="paid"]:has(td[data-automatic="true"])';
  await reloadUntil(async () => (await page.locator(paidAutomatic).count()) > 0, 'a paid payout of the daily schedule', 60000);
  await shot(page, 'payouts');
  await Promise.all([page.waitForURL('**/dashboard/payouts/po_*'), page.click(`${paidAutomatic} td.num a`)]);
  const settled = page.locator('#settled');
  out.automatic = {
    id: (await page.textContent('#payout-id')).trim(),
    amount: await number('#payout-heading', 'data-amount'),
    status: await page.getAttribute('#payout-status', 'data-status'),
    count: Number(await settled.getAttribute('data-count')),
    net: Number(await settled.getAttribute('data-net')),
    listed: await page.$$eval('#settled tbody tr[data-transaction]', (els) => els.map((e) => e.dataset.transaction)),
    balances: await page.getAttribute('#sum-check', 'data-balances'),
    sumCheck: (await page.textContent('#sum-check')).trim(),
  };
  await shot(page, 'payout');
  step('done');
} catch (e) {
  await failed(e, 'ledger');
} finally {
  await browser.close();
}
done();
console.log(JSON.stringify(out));
