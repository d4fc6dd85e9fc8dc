// The dashboard's reconciliation (docs/ledger.md, "The dashboard") in a
// real browser: Debian's chromium driven by playwright-core.
// browser_ledger_test.go runs it after ledger.mjs, on the same stack and
// merchant, with the days of a connector's traffic and that connector's
// settlement report of its busiest day, tampered; it prints one JSON line
// with what the journey saw, and leaves a screenshot of each page.
//
//   node reconcile.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, email, password, shots, connector, days, tampered}.
// The journey: sign in; open Reconciliation from the Money section;
// reconcile each day with the provider's report (nothing differs); paste
// a report that is not one (refused on the page); upload the tampered
// report as a file and see its exceptions, both sides of each; adjust the
// amount that differs, with a note (the page asks first), and accept the
// fee that differs; see both resolved, and the runs and the exceptions
// still open on the list.
import { dashboardPage, launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { steps: {}, pageErrors: [], consoleErrors: [], days: [], refused: {}, upload: {}, adjusted: {}, accepted: {}, list: {} };
const { step, check, done } = steps(out);

const browser = await launch();
const { page, shot, expectError, failed } = await dashboardPage(browser, out, cfg.shots);
// The adjust button asks before it books: say yes, and keep the question.
page.on('dialog', async (d) => { out.adjusted.asked = d.message(); await d.accept(); });

// run reads a run's page: its status and counts, and its exceptions.
async function run() {
  const counts = page.locator('#run-counts');
  return {
    id: (await page.textContent('#run-id')).trim(),
    status: await page.getAttribute('#run-status', 'data-status'),
    lines: Number(await counts.getAttribute('data-lines')),
    matched: Number(await counts.getAttribute('data-matched')),
    exceptions: Number(await counts.getAttribute('data-exceptions')),
    open: Number(await counts.getAttribute('data-open')),
    listed: await page.$$eval('article.exception', (els) => els.map((e) => ({
      id: e.dataset.exception, kind: e.dataset.kind, status: e.dataset.status, reference: e.dataset.reference,
      netDiff: Number(e.querySelector('[data-net-diff]').dataset.netDiff),
      link: (e.querySelector('[data-gateway-object] a') || { getAttribute: () => '' }).getAttribute('href'),
    }))),
  };
}

// resolve resolves the exception of a kind on the run's page.
async function resolve(kind, action, note) {
  const card = page.locator(`article.exception[data-kind="${kind}"]`);
  const id = await card.getAttribute('data-exception');
  await card.locator('textarea[name=note]').fill(note);
  await Promise.all([page.waitForURL(`**notice=${action === 'adjust' ? 'adjusted' : 'accepted'}*`),
    card.locator(`button[name=action][value=${action}]`).click()]);
  const done = page.locator(`article.exception[data-exception="${id}"]`);
  const adjustment = done.locator('[data-adjustment]');
  return {
    id,
    notice: (await page.textContent('#notice')).trim(),
    status: await done.getAttribute('data-status'),
    action: await done.locator('.resolution').getAttribute('data-action'),
    note: (await done.locator('[data-note]').textContent()).trim(),
    by: (await done.locator('[data-by]').textContent()).trim(),
    transaction: (await adjustment.count()) ? await adjustment.getAttribute('data-adjustment') : '',
    net: (await adjustment.count()) ? Number(await adjustment.getAttribute('data-net')) : 0,
    forms: await done.locator('form.resolve').count(),
  };
}

try {
  step('sign_in');
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);
  await Promise.all([page.waitForURL('**/dashboard/balance'), page.click('nav[aria-label=Sections] a[href="/dashboard/balance"]')]);
  await Promise.all([page.waitForURL('**/dashboard/reconciliations'), page.click('nav[aria-label=Money] a[href="/dashboard/reconciliations"]')]);

  step('by_day');
  for (const day of cfg.days) {
    await page.selectOption('#day-connector', cfg.connector);
    await page.fill('#day-date', day);
    await Promise.all([page.waitForURL('**/dashboard/reconciliations/rec_*notice=reconciled'), page.click('#reconcile-day button[type=submit]')]);
    out.days.push({ day, ...(await run()), allMatched: await page.locator('#all-matched').count() });
    await page.goto(`${cfg.api}/dashboard/reconciliations`);
  }

  step('refused');
  await page.selectOption('#upload-connector', cfg.connector);
  await page.fill('#report-text', 'provider_reference,type\nsbx_ch_1,charge\n');
  expectError(/status of 400/);
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url() === `${cfg.api}/dashboard/reconciliations` && r.request().method() === 'POST'),
    page.click('#reconcile-upload button[type=submit]')]);
  await page.waitForSelector('#error');
  out.refused = { status: refused.status(), message: (await page.textContent('#error strong')).trim(), kept: await page.inputValue('#report-text') };

  step('upload');
  await page.fill('#report-text', '');
  await page.selectOption('#upload-connector', cfg.connector);
  await page.setInputFiles('#report-file', { name: 'settlement.csv', mimeType: 'text/csv', buffer: Buffer.from(cfg.tampered) });
  await Promise.all([page.waitForURL('**/dashboard/reconciliations/rec_*notice=reconciled'), page.click('#reconcile-upload button[type=submit]')]);
  out.upload = await run();

  step('resolve');
  const adjusted = await resolve('amount_mismatch', 'adjust', 'The bank statement shows the higher amount.');
  out.adjusted = { ...out.adjusted, ...adjusted }; // with the question the page asked
  out.accepted = await resolve('fee_mismatch', 'accept', 'The provider corrected its fee in the next report.');
  out.resolved = await run();
  await page.locator('#run-heading').scrollIntoViewIfNeeded();
  await shot(page, 'reconciliation');

  step('list');
  await Promise.all([page.waitForURL('**/dashboard/reconciliations'), page.click('nav[aria-label=Money] a[href="/dashboard/reconciliations"]')]);
  out.list = {
    runs: await page.$$eval('#runs tbody tr[data-reconciliation]', (els) => els.map((e) => ({
      id: e.dataset.reconciliation, status: e.dataset.status, open: Number(e.dataset.open), matched: Number(e.dataset.matched) }))),
    open: await page.$$eval('#open-exceptions tbody tr[data-exception]', (els) => els.map((e) => e.dataset.exception)),
  };
  await shot(page, 'reconciliations');
  step('done');
} catch (e) {
  await failed(e, 'reconcile');
} finally {
  await browser.close();
}
done();
console.log(JSON.stringify(out));
