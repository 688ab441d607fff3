// End-to-end test of the dashboard in Debian's chromium, driven by playwright-core. Run by
// tests/api/browser.rs (part of `cargo test`) against a server it started on loopback, with:
//   BASE_URL, MONTH, ADMIN_TOKEN, FINANCE_TOKEN, LEAD_TOKEN, LEAD_TEAM, SCREENSHOTS (a folder)
// It exits non-zero, saying why, on the first failed check.
import { chromium } from 'playwright-core';
import { readFileSync, mkdirSync } from 'node:fs';
import assert from 'node:assert/strict';

const { BASE_URL, MONTH, ADMIN_TOKEN, FINANCE_TOKEN, LEAD_TOKEN, LEAD_TEAM, SCREENSHOTS } = process.env;
for (const [k, v] of Object.entries({ BASE_URL, MONTH, ADMIN_TOKEN, FINANCE_TOKEN, LEAD_TOKEN, LEAD_TEAM, SCREENSHOTS })) {
  if (!v) throw new Error(`${k} is not set`);
}
mkdirSync(SCREENSHOTS, { recursive: true });

async function api(token, path) {
  const r = await fetch(BASE_URL + path, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(r.status, 200, `GET ${path}: ${r.status}`);
  return r.json();
}

/** "USD 1,337.14" -> "1337.14"; "-0.01" stays. */
function amount(text) {
  const m = text.replace(/,/g, '').match(/-?\d+(\.\d+)?/);
  assert.ok(m, `no number in ${JSON.stringify(text)}`);
  return m[0];
}

/** Equal as decimals, whatever the trailing zeros. */
function sameDecimal(a, b, what) {
  assert.equal(Number(a).toFixed(6), Number(b).toFixed(6), `${what}: page says ${a}, API says ${b}`);
}

/** A minimal RFC 4180 reader (quotes, doubled quotes, commas and newlines inside quotes). */
function parseCsv(text) {
  const rows = [];
  let row = [], field = '', quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n') { row.push(field); rows.push(row); row = []; field = ''; }
    else if (c !== '\r') field += c;
  }
  if (field || row.length) { row.push(field); rows.push(row); }
  return rows;
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--disable-default-apps'],
});

// Every request any page makes, to prove none leaves the machine.
const requests = [];

async function newSession(viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  context.on('request', (r) => requests.push(r.url()));
  return { context, page: await context.newPage() };
}

async function signIn(page, token) {
  await page.goto(BASE_URL + '/ui/signin');
  await page.fill('#token', token);
  await Promise.all([page.waitForURL((u) => !u.pathname.endsWith('/signin')), page.click('button[type=submit]')]);
}

/** Labels for every form field, names for every chart, a page language. */
async function checkAccessibility(page, what) {
  const problems = await page.evaluate(() => {
    const out = [];
    if (!document.documentElement.lang) out.push('the page has no lang');
    for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
      const labelled = (el.id && document.querySelector(`label[for="${el.id}"]`)) || el.getAttribute('aria-label')
        || el.getAttribute('aria-labelledby') || el.closest('label');
      if (!labelled) out.push(`unlabelled field ${el.outerHTML}`);
    }
    for (const svg of document.querySelectorAll('svg')) {
      const ids = (svg.getAttribute('aria-labelledby') || '').split(/\s+/).filter(Boolean);
      const named = ids.length && ids.every((id) => (document.getElementById(id)?.textContent || '').trim());
      if (svg.getAttribute('role') !== 'img' || !named) out.push(`chart without a text alternative: ${svg.dataset.chart}`);
    }
    for (const img of document.querySelectorAll('img')) if (!img.hasAttribute('alt')) out.push(`img without alt`);
    for (const b of document.querySelectorAll('button')) if (!(b.textContent.trim() || b.getAttribute('aria-label'))) out.push('button without a name');
    return out;
  });
  assert.deepEqual(problems, [], `${what}: accessibility`);
}

async function checkCharts(page, names) {
  for (const name of names) {
    const marks = await page.locator(`svg[data-chart="${name}"] .mark`).count();
    assert.ok(marks > 0, `chart ${name} has no data marks`);
    const hover = await page.locator(`svg[data-chart="${name}"] .mark title`).first().textContent();
    assert.ok(hover.trim().length > 0, `chart ${name} has no hover values`);
  }
}

/** The last `n` months up to this one, as `YYYY-MM`: [first, last]. */
function lastMonths(n) {
  const d = new Date();
  const last = d.toISOString().slice(0, 7);
  d.setUTCDate(1);
  d.setUTCMonth(d.getUTCMonth() - (n - 1));
  return [d.toISOString().slice(0, 7), last];
}

/** The page's cost-over-time table, month by month, against the usage API grouped as the chart. */
async function checkCostOverTime(page, token, [first, last], groupBy) {
  const to = new Date(`${last}-01T00:00:00Z`);
  to.setUTCMonth(to.getUTCMonth() + 1);
  const usage = await api(token, `/v1/reports/usage?from=${first}-01&to=${to.toISOString().slice(0, 10)}` +
    `&group_by=${groupBy}&step=month`);
  const byMonth = {};
  for (const r of usage.rows) {
    const m = r.bucket.slice(0, 7);
    byMonth[m] = (byMonth[m] || 0) + Math.round(Number(r.cost || 0) * 100);
  }
  const rows = page.locator('table[data-table="cost-over-time"] tbody tr');
  const n = await rows.count();
  assert.ok(n >= 2, 'a row per month');
  let nonZero = 0;
  for (let i = 0; i < n; i++) {
    const period = await rows.nth(i).getAttribute('data-period');
    const cents = Math.round(Number(amount(await rows.nth(i).locator('[data-field="period-cost"]').textContent())) * 100);
    assert.equal(cents, byMonth[period] || 0, `cost over time, ${period}: page ${cents / 100}, API ${(byMonth[period] || 0) / 100}`);
    if (cents !== 0) nonZero++;
  }
  assert.ok(nonZero > 0, 'some month has a cost');
}

/** Bytes a fresh load of `path` transfers (document and everything it loads). */
async function firstLoadBytes(context, path) {
  const page = await context.newPage();
  let bytes = 0;
  page.on('response', async (r) => { try { bytes += (await r.body()).length; } catch { /* redirects */ } });
  await page.goto(BASE_URL + path, { waitUntil: 'networkidle' });
  await page.close();
  return bytes;
}

// --- Sign-in page -----------------------------------------------------------------------------
{
  const { context, page } = await newSession();
  await page.goto(BASE_URL + '/ui/');
  assert.ok(page.url().endsWith('/ui/signin'), 'an anonymous visit goes to sign-in');
  await checkAccessibility(page, 'sign-in');
  await page.screenshot({ path: `${SCREENSHOTS}/signin.png`, fullPage: true });
  await page.fill('#token', 'smt_1_' + '0'.repeat(64));
  await page.click('button[type=submit]');
  await page.waitForSelector('.error');
  assert.match(await page.textContent('.error'), /not valid/);
  await context.close();
}

// --- Finance: the fleet page ------------------------------------------------------------------
const report = await api(FINANCE_TOKEN, `/v1/reports/monthly/${MONTH}`);
const teams = await api(FINANCE_TOKEN, '/v1/teams');
{
  const { context, page } = await newSession();
  await signIn(page, FINANCE_TOKEN);
  assert.ok(page.url().includes('/ui/fleet'), `finance lands on the fleet page, not ${page.url()}`);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'slicemeter_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', `session cookie ${JSON.stringify(session)}`);

  await page.goto(`${BASE_URL}/ui/fleet?month=${MONTH}`);
  for (const field of ['fleet_cost', 'team_charges', 'unattributed', 'unallocated', 'placeable', 'stranded', 'sharing_discount', 'rounding_residual']) {
    const text = await page.textContent(`[data-field="${field}"]`);
    sameDecimal(amount(text), report.conservation[field], field);
  }
  assert.ok(report.teams.length > 1, 'the month has several teams');
  for (const t of report.teams) {
    const text = await page.textContent(`tr[data-team="${t.team}"] [data-field="cost"]`);
    sameDecimal(amount(text), t.cost, `${t.team} cost`);
  }
  await checkCharts(page, ['conservation', 'team-cost', 'allocation', 'gpu-map']);
  // Cost over time (the last 12 months by default), by team, as the usage API has it.
  await checkCharts(page, ['cost-over-time']);
  await checkCostOverTime(page, FINANCE_TOKEN, lastMonths(12), 'team');
  await checkAccessibility(page, 'fleet');
  await page.screenshot({ path: `${SCREENSHOTS}/fleet.png`, fullPage: true });

  // A notice comes from the page's own words: text put in the link is not shown.
  await page.goto(`${BASE_URL}/ui/fleet?month=${MONTH}&notice=Call+555-0100+now&done=nonsense`);
  assert.equal(await page.locator('.notice[role=status]').count(), 0, 'no notice from the link');
  assert.ok(!(await page.content()).includes('555-0100'), 'link text is not on the page');

  // The invoice run at a click, then the invoices as the API has them.
  await Promise.all([page.waitForURL(/done=drafted/), page.click('text=Make drafts for')]);
  assert.match(await page.textContent('.notice'), /Drafts for \d{4}-\d{2} are made/);
  const invoices = await api(FINANCE_TOKEN, `/v1/invoices?period=${MONTH}`);
  assert.ok(invoices.length > 1, 'drafts exist');
  assert.ok(invoices.every((i) => i.team !== 'unattributed'), 'unattributed is never invoiced');
  for (const i of invoices) {
    const text = await page.textContent(`tr[data-invoice="${i.id}"] [data-field="total"]`);
    sameDecimal(amount(text), i.total, `invoice ${i.id} total`);
  }
  // Issuing one invoice asks first.
  const first = invoices[0];
  await Promise.all([page.waitForURL(/\/issue$/), page.click(`tr[data-invoice="${first.id}"] a:text("Issue…")`)]);
  sameDecimal(amount(await page.textContent('[data-field="total"]')), first.total, 'the confirmation names the total');
  await checkAccessibility(page, 'issue confirmation');
  assert.equal((await api(FINANCE_TOKEN, `/v1/invoices/${first.id}`)).status, 'draft', 'nothing issued before confirming');
  await Promise.all([page.waitForURL(/done=issued/), page.click('button:text("Issue invoice")')]);
  assert.equal((await page.textContent(`tr[data-invoice="${first.id}"] [data-field="status"]`)).trim(), 'issued');
  const issued = await api(FINANCE_TOKEN, `/v1/invoices/${first.id}`);
  assert.equal(issued.status, 'issued');
  assert.match(await page.textContent('.notice'), new RegExp(issued.number));

  // The CSV download works and adds up to the invoice.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.click(`tr[data-invoice="${first.id}"] a:text("CSV")`),
  ]);
  assert.match(download.suggestedFilename(), new RegExp(`^slicemeter-invoice-${issued.number}-`));
  const rows = parseCsv(readFileSync(await download.path(), 'utf8'));
  const col = rows[0].indexOf('amount');
  const sum = rows.slice(1).reduce((s, r) => s + Math.round(Number(r[col]) * 100), 0) / 100;
  sameDecimal(sum, issued.total, 'CSV lines');
  assert.equal(rows.length - 1, issued.lines.length);

  // The month before carries late data for its issued invoices: pending corrections, as the API says.
  const previous = `${MONTH.slice(0, 4)}-${String(Number(MONTH.slice(5)) - 1).padStart(2, '0')}`;
  const earlier = await api(FINANCE_TOKEN, `/v1/reports/monthly/${previous}`);
  assert.equal(earlier.state, 'issued');
  assert.ok(earlier.pending_corrections.length > 0, 'late data waits as corrections');
  await page.goto(`${BASE_URL}/ui/fleet?month=${previous}`);
  const pending = await page.locator('tr[data-pending] [data-field="pending_amount"]').allTextContents();
  const pendingApi = earlier.pending_corrections.flatMap((p) => p.lines.map((l) => l.amount));
  assert.deepEqual(pending.map(amount).sort(), pendingApi.map((a) => Number(a).toFixed(2)).sort(), 'pending corrections');

  // Issue the rest of the month at once, after a confirmation.
  await page.goto(`${BASE_URL}/ui/fleet?month=${MONTH}`);
  const drafts = (await api(FINANCE_TOKEN, `/v1/invoices?period=${MONTH}`)).filter((i) => i.status === 'draft');
  await Promise.all([page.waitForURL(/\/ui\/invoices\/issue\?/), page.click('a:text("Issue all")')]);
  const draftTotal = drafts.reduce((s, i) => s + Math.round(Number(i.total) * 100), 0) / 100;
  sameDecimal(amount(await page.textContent('[data-field="total"]')), draftTotal, 'issue-all total');
  await Promise.all([page.waitForURL(/done=issued_all/), page.click('button:text("Issue all")')]);
  const after = await api(FINANCE_TOKEN, `/v1/invoices?period=${MONTH}`);
  assert.ok(after.every((i) => i.status === 'issued'), 'every invoice of the month is issued');
  assert.equal((await api(FINANCE_TOKEN, `/v1/reports/monthly/${MONTH}`)).state, 'issued');
  // Its corrections are billed now: nothing of the month before is pending any more.
  assert.deepEqual((await api(FINANCE_TOKEN, `/v1/reports/monthly/${previous}`)).pending_corrections, []);
  await page.screenshot({ path: `${SCREENSHOTS}/fleet-issued.png`, fullPage: true });
  // An invoice as a page, from its number in the table: every line with its provenance, as the API
  // has it; the month's corrections of the month before in a section of their own.
  let withCorrections = null;
  for (const i of after) {
    const full = await api(FINANCE_TOKEN, `/v1/invoices/${i.id}`);
    if (full.lines.some((l) => l.line_kind === 'correction')) { withCorrections = full; break; }
  }
  assert.ok(withCorrections, 'an invoice carries corrections');
  await Promise.all([page.waitForURL(new RegExp(`/ui/invoices/${withCorrections.id}$`)),
    page.click(`tr[data-invoice="${withCorrections.id}"] a[data-field="open"]`)]);
  assert.equal(await page.textContent('h1'), `Invoice ${withCorrections.number}`);
  sameDecimal(amount(await page.textContent('[data-field="total"]')), withCorrections.total, 'invoice page total');
  for (const l of withCorrections.lines) {
    const row = page.locator(`tr[data-line="${l.line_no}"]`);
    sameDecimal(amount(await row.locator('[data-field="amount"]').textContent()), l.amount, `line ${l.line_no}`);
    assert.equal((await row.locator('[data-field="rate-card"]').textContent()).trim(), l.rate_card ? `v${l.rate_card}` : '');
  }
  const corrections = withCorrections.lines.filter((l) => l.line_kind === 'correction').length;
  assert.equal(await page.locator('section[data-section="corrections"] tbody tr').count(), corrections, 'correction lines');
  assert.equal(await page.locator('a:text("Download this invoice (CSV)")').count(), 1, 'the CSV beside it');
  await checkAccessibility(page, 'invoice');
  await page.screenshot({ path: `${SCREENSHOTS}/invoice.png`, fullPage: true });

  const bytes = await firstLoadBytes(context, `/ui/fleet?month=${MONTH}`);
  assert.ok(bytes < 300 * 1024, `the fleet page's first load is ${bytes} bytes`);
  console.log(`fleet page first load: ${bytes} bytes`);

  // Finance may open any team's page; it shows the report's figures.
  const team = report.teams.find((t) => t.team !== LEAD_TEAM);
  await page.goto(`${BASE_URL}/ui/team/${team.team}?month=${MONTH}`);
  sameDecimal(amount(await page.textContent('[data-field="cost"]')), team.cost, `${team.team} page cost`);
  await page.click('button:text("Sign out")');
  await page.waitForURL(/\/ui\/signin$/);
  await page.goto(`${BASE_URL}/ui/fleet?month=${MONTH}`);
  assert.ok(page.url().endsWith('/ui/signin'), 'signed out, the fleet page asks to sign in again');
  await context.close();
}

// --- A team lead: their own team, nothing of the others --------------------------------------
{
  const others = teams.filter((t) => t.team !== LEAD_TEAM);
  const own = await api(LEAD_TOKEN, `/v1/reports/monthly/${MONTH}`);
  assert.equal(own.teams.length, 1);
  const { context, page } = await newSession();
  await signIn(page, LEAD_TOKEN);
  assert.ok(page.url().includes(`/ui/team/${LEAD_TEAM}`), `a lead lands on their team page, not ${page.url()}`);
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
  sameDecimal(amount(await page.textContent('[data-field="cost"]')), own.teams[0].cost, 'own cost');
  sameDecimal(amount(await page.textContent('[data-field="gpu_equivalent_hours"]')),
    Number(own.teams[0].gpu_equivalent_hours).toFixed(2), 'own GPU-equivalent hours');
  await checkCharts(page, ['cost-over-time']);
  await checkCostOverTime(page, LEAD_TOKEN, lastMonths(12), 'workload');
  await checkAccessibility(page, 'team');
  // The presets: the last 3 months by month; this month by day.
  await Promise.all([page.waitForURL(/range=3m/), page.click('nav.presets a:text("Last 3 months")')]);
  await checkCostOverTime(page, LEAD_TOKEN, lastMonths(3), 'workload');
  await Promise.all([page.waitForURL(/range=this-month/), page.click('nav.presets a:text("This month")')]);
  const dayRows = await page.locator('table[data-table="cost-over-time"] tbody tr').count();
  assert.equal(dayRows, new Date().getUTCDate(), 'a row per day of this month so far');
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
  // The workload table: a row per workload and slice, its costs the usage API's (the invoices').
  const next = new Date(`${MONTH}-01T00:00:00Z`);
  next.setUTCMonth(next.getUTCMonth() + 1);
  const usage = await api(LEAD_TOKEN, `/v1/reports/usage?from=${MONTH}-01&to=${next.toISOString().slice(0, 10)}` +
    '&group_by=namespace,workload,gpu_model,kind,profile&step=month');
  const workloadRows = page.locator('table[data-table="workloads"] tbody tr');
  const cents = (xs) => xs.reduce((s, x) => s + Math.round(Number(x) * 100), 0);
  // The first page: the 20 costliest, as the usage API has them; the rest a click away.
  const byCost = usage.totals.map((t) => Math.round(Number(t.cost || 0) * 100)).sort((a, b) => b - a);
  assert.ok(usage.totals.length > 20, `the fixture has more than a page of workloads: ${usage.totals.length}`);
  assert.equal(await workloadRows.count(), 20, 'the top 20 workloads');
  const topCosts = await page.locator('table[data-table="workloads"] [data-field="cost"]').allTextContents();
  assert.deepEqual(topCosts.map((t) => Math.round(Number(amount(t)) * 100)), byCost.slice(0, 20), 'the costliest first');
  await Promise.all([page.waitForURL(/page=all/), page.click('[data-field="show-all"]')]);
  assert.equal(await workloadRows.count(), usage.totals.length, 'a table row per workload and slice');
  const tableCosts = await page.locator('table[data-table="workloads"] [data-field="cost"]').allTextContents();
  assert.equal(cents(tableCosts.map(amount)), cents(usage.totals.map((t) => t.cost)), 'the table adds up to the usage API');
  // Cost and efficiency are in view at 1280 px, without scrolling the table.
  for (const heading of ['Cost', 'Efficiency']) {
    const box = await page.locator(`table[data-table="workloads"] th a:text-is("${heading}")`).boundingBox();
    assert.ok(box && box.x + box.width <= 1280, `the ${heading} heading is in view at 1280 px: ${JSON.stringify(box)}`);
  }
  // Time-sliced replicas reserve nothing: no efficiency of a reservation, no reserved memory.
  const timesliced = page.locator('table[data-table="workloads"] tr[data-kind="timeslice"]');
  assert.ok(await timesliced.count() > 0, 'the fixture has time-sliced replicas');
  for (const row of await timesliced.all()) {
    assert.equal((await row.locator('[data-field="efficiency"]').textContent()).trim(), 'pay-per-use');
    assert.match(await row.textContent(), /none reserved/);
  }
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
  // Right-sizing: the lead's oversized workload, with the API's saving, in its summary and inline.
  const recs = await api(LEAD_TOKEN, '/v1/recommendations');
  const embedder = recs.find((r) => r.workload === 'embedder' && r.action === 'resize');
  assert.ok(embedder, 'the API recommends a smaller slice for the embedder');
  const row = page.locator('table[data-table="right-sizing"] tr[data-workload="embedder"]');
  assert.match(await row.textContent(), new RegExp(`Move to ${embedder.recommended_profile}`));
  sameDecimal(amount(await row.locator('[data-field="saving"]').textContent()), embedder.monthly_delta, 'right-sizing saving');
  // Or MPS, with less isolation, where the target allows it.
  assert.ok(embedder.shared_alternative, 'the API offers an MPS share for the embedder');
  const mps = await row.locator('[data-field="mps"]').textContent();
  assert.match(mps, new RegExp(`${embedder.shared_alternative.active_thread_percentage} % of the threads`));
  sameDecimal(amount(mps.split('saves')[1]), embedder.shared_alternative.monthly_delta, 'MPS saving');
  // Inline, beside the workload's row of a month it ran in (its last 14 days).
  const recent = new Date(Date.now() - 2 * 86400e3).toISOString().slice(0, 7);
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${recent}`);
  const inline = page.locator('table[data-table="workloads"] tr[data-workload="embedder"]', { hasText: 'rs-demo' });
  assert.equal(await inline.count(), 1, `the embedder's row in ${recent}`);
  const advice = await inline.locator('[data-field="saving"]').textContent();
  assert.match(advice, new RegExp(`Move to ${embedder.recommended_profile}`));
  sameDecimal(amount(advice.split(':')[1]), embedder.monthly_delta, 'inline saving');
  // The current month's forecast card: the API's forecast (read a moment apart, so to the cent).
  const thisMonth = new Date().toISOString().slice(0, 7);
  // Finance gives the team a budget; the card shows the month against it as the API does.
  const made = await fetch(`${BASE_URL}/v1/budgets`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${FINANCE_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ team: LEAD_TEAM, amount: '100.00', currency: 'USD',
      thresholds: [{ kind: 'actual', percent: 1 }, { kind: 'forecast', percent: 100 }] }),
  });
  assert.equal(made.status, 201, `POST /v1/budgets: ${made.status}`);
  const forecast = await api(LEAD_TOKEN, '/v1/reports/forecast');
  assert.equal(forecast.teams.length, 1, 'the right-sizing workload ran in the last days');
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${thisMonth}`);
  const card = Number(amount(await page.textContent('[data-field="forecast"]')));
  assert.ok(Math.abs(card - Number(forecast.teams[0].forecast)) <= 0.011,
    `forecast: page says ${card}, API says ${forecast.teams[0].forecast}`);
  // Another team's budget: the lead neither lists nor reads it.
  const other = others.find((t) => t.team !== 'unattributed');
  const theirs = await fetch(`${BASE_URL}/v1/budgets`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${FINANCE_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ team: other.team, amount: '777.00', currency: 'USD',
      thresholds: [{ kind: 'actual', percent: 50 }] }),
  });
  assert.equal(theirs.status, 201, `POST /v1/budgets for ${other.team}: ${theirs.status}`);
  const theirId = (await theirs.json()).id;
  const peek = await fetch(`${BASE_URL}/v1/budgets/${theirId}`, { headers: { Authorization: `Bearer ${LEAD_TOKEN}` } });
  assert.equal(peek.status, 404, 'a lead reading another team\'s budget');
  const budgets = await api(LEAD_TOKEN, '/v1/budgets');
  assert.deepEqual(budgets.map((b) => b.team), [LEAD_TEAM], 'a lead lists their own team\'s budget only');
  const [budget] = budgets;
  sameDecimal(amount(await page.textContent('[data-field="budget"]')), budget.current.budget, 'budget');
  sameDecimal(amount(await page.textContent('[data-field="budget-spent-percent"]')),
    budget.current.spent_percent, 'spent, percent of the budget');
  // The budget on the charts: a line on the months, the forecast band on this month, the burn-down.
  assert.equal(await page.locator('svg[data-chart="cost-over-time"] [data-reference="budget"]').count(), 1, 'budget line');
  assert.equal(await page.locator('svg[data-chart="cost-over-time"] [data-band]').count(), 1, 'forecast band');
  await checkCharts(page, ['burn-down']);
  sameDecimal(amount(await page.textContent('[data-field="burn-budget"]')), budget.current.budget, 'burn-down budget');
  sameDecimal(amount(await page.textContent('[data-field="burn-spent"]')), budget.current.spent, 'burn-down spent');
  const crossed = budget.current.crossed.map((t) => `${t.kind} ${t.percent} %`).join(', ');
  if (crossed) {
    assert.equal((await page.textContent('[data-field="budget-crossed"]')).trim(), `Crossed: ${crossed}`);
  }
  await page.screenshot({ path: `${SCREENSHOTS}/team-this-month.png` });
  await page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
  // The table as CSV: the same rows, the same costs.
  const [csvDownload] = await Promise.all([
    page.waitForEvent('download'),
    page.click('a:text("Download this table (CSV)")'),
  ]);
  assert.equal(csvDownload.suggestedFilename(), `slicemeter-workloads-${LEAD_TEAM}-${MONTH}.csv`);
  const csvRows = parseCsv(readFileSync(await csvDownload.path(), 'utf8'));
  const costAt = csvRows[0].indexOf('cost');
  assert.ok(costAt > 0 && csvRows[0].includes('workload') && csvRows[0].includes('memory_p99_gib'), `CSV header ${csvRows[0]}`);
  assert.equal(csvRows.length - 1, usage.totals.length, 'a CSV record per table row');
  assert.equal(cents(csvRows.slice(1).map((r) => r[costAt])), cents(usage.totals.map((t) => t.cost)), 'the CSV adds up');
  await page.screenshot({ path: `${SCREENSHOTS}/team.png`, fullPage: true });

  // Sorting by a heading, by keyboard.
  await page.focus('th a:text("Held hours")');
  await Promise.all([page.waitForURL(/sort=held/), page.keyboard.press('Enter')]);
  const held = (await page.locator('table[data-table="workloads"] tbody tr td:nth-child(7)').allTextContents()).map((t) => Number(amount(t)));
  assert.deepEqual(held, [...held].sort((a, b) => b - a), 'sorted by held hours, most first');

  const leaks = async (what) => {
    const text = await page.evaluate(() => document.documentElement.outerHTML);
    for (const t of others) {
      const pattern = new RegExp(`\\b${t.team.replace(/[-_]/g, '[-_]')}\\b`);
      assert.ok(!pattern.test(text) && !text.includes(t.display_name), `${what} shows team ${t.team}`);
    }
  };
  await leaks('the team page');
  for (const t of others) {
    const r = await page.goto(`${BASE_URL}/ui/team/${t.team}?month=${MONTH}`);
    assert.equal(r.status(), 404, `a lead opening ${t.team}'s page`);
    await leaks(`${t.team}'s page`);
  }
  const fleet = await page.goto(`${BASE_URL}/ui/fleet?month=${MONTH}`);
  assert.equal(fleet.status(), 403, 'a lead opening the fleet page');
  await leaks('the fleet page');
  await page.screenshot({ path: `${SCREENSHOTS}/forbidden.png`, fullPage: true });
  const all = await api(FINANCE_TOKEN, `/v1/invoices?period=${MONTH}`);
  const foreign = all.find((i) => i.team !== LEAD_TEAM);
  const workloadsCsv = await page.goto(`${BASE_URL}/ui/team/${foreign.team}/workloads.csv?month=${MONTH}`);
  assert.equal(workloadsCsv.status(), 404, 'another team\'s workload CSV');
  await leaks('another team\'s workload CSV');
  const csv = await page.goto(`${BASE_URL}/ui/invoices/${foreign.id}.csv`);
  assert.equal(csv.status(), 404, 'another team\'s invoice CSV');
  const foreignPage = await page.goto(`${BASE_URL}/ui/invoices/${foreign.id}`);
  assert.equal(foreignPage.status(), 404, 'another team\'s invoice page');
  await leaks('another team\'s invoice page');
  const ownInvoice = all.find((i) => i.team === LEAD_TEAM);
  const ownPage = await page.goto(`${BASE_URL}/ui/invoices/${ownInvoice.id}`);
  assert.equal(ownPage.status(), 200, 'the lead\'s own invoice page');
  sameDecimal(amount(await page.textContent('[data-field="total"]')), ownInvoice.total, 'own invoice total');
  await leaks('another team\'s invoice');
  await context.close();

  // A lead's first screen on a laptop: the month's cost and, beside it, the top saving with its
  // amount, the API's figure for that workload; every step a month, none larger than the first.
  {
    const laptop = await newSession({ width: 1366, height: 900 });
    await signIn(laptop.page, LEAD_TOKEN);
    const p = laptop.page;
    await p.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
    const inFirstScreen = async (selector) => {
      const box = await p.locator(selector).first().boundingBox();
      assert.ok(box && box.y >= 0 && box.y + box.height <= 900 && box.x + box.width <= 1366,
        `${selector} is in the first screen at 1366x900: ${JSON.stringify(box)}`);
    };
    await inFirstScreen('[data-field="cost"]');
    await inFirstScreen('[data-field="top-saving-amount"]');
    sameDecimal(amount(await p.textContent('[data-field="cost"]')), own.teams[0].cost, 'first-screen cost');
    const top = Number(amount(await p.textContent('[data-field="top-saving-amount"]')));
    const figures = (r) => [r.monthly_delta, r.shared_alternative?.monthly_delta, r.so_far?.monthly_delta,
      r.so_far?.shared_alternative?.monthly_delta].filter((x) => x != null).map(Number);
    const topWorkload = (await p.textContent('[data-field="top-saving"]')).match(/ for (\S+), /)[1];
    const topRec = recs.filter((r) => r.workload === topWorkload);
    assert.ok(topRec.some((r) => figures(r).some((f) => Math.abs(f - top) < 0.005)),
      `the top saving ${top} is the API's figure for ${topWorkload}`);
    const steps = (await p.locator('table[data-table="right-sizing"] [data-field="saving"]').allTextContents())
      .filter((t) => /\d/.test(t) && !t.includes('more')).map((t) => Number(amount(t)));
    assert.equal(steps[0], top, 'the first step is the top saving');
    assert.ok(steps.every((x) => x <= top), `no step saves more than the first: ${steps}`);
    // One message: nothing says a workload needs nothing; each highlighted (idle) row that has a
    // step says the step's words.
    const text = await p.evaluate(() => document.body.innerText);
    assert.ok(!/holds what it needs|needs nothing|consider giving/i.test(text), 'no contradicting message');
    if (await p.locator('[data-field="show-all"]').count()) {
      await Promise.all([p.waitForURL(/page=all/), p.click('[data-field="show-all"]')]);
    }
    for (const row of await p.locator('table[data-table="workloads"] tr.idle').all()) {
      const w = await row.getAttribute('data-workload');
      const advice = (await row.locator('[data-field="saving"]').textContent()).trim();
      const step = p.locator(`table[data-table="right-sizing"] tr[data-workload="${w}"] [data-field="do"] strong`);
      if (await step.count() === 1) {
        assert.ok(advice.startsWith((await step.textContent()).trim()), `${w}: the table says ${advice}`);
      }
    }
    // No column cut and no sideways scroll at 1366 px: every table fits its box.
    for (const table of ['right-sizing', 'workloads']) {
      const cut = await p.evaluate((t) => {
        const el = document.querySelector(`table[data-table="${t}"]`);
        return el ? el.parentElement.scrollWidth - el.parentElement.clientWidth : 0;
      }, table);
      assert.ok(cut <= 0, `the ${table} table is ${cut} px wider than its box at 1366 px`);
    }
    const wide = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(wide <= 0, `the page scrolls ${wide} px sideways at 1366 px`);
    await p.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
    await p.screenshot({ path: `${SCREENSHOTS}/team-first-screen.png` });
    await laptop.context.close();
  }

  // A phone.
  const phone = await newSession({ width: 390, height: 844 });
  await signIn(phone.page, LEAD_TOKEN);
  await phone.page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}&page=all`);
  const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow} px wider than a phone`);
  for (const table of ['right-sizing', 'workloads']) {
    const cut = await phone.page.evaluate((t) => {
      const el = document.querySelector(`table[data-table="${t}"]`);
      return el ? el.parentElement.scrollWidth - el.parentElement.clientWidth : 0;
    }, table);
    assert.ok(cut <= 0, `the ${table} table is ${cut} px wider than a phone`);
  }
  await phone.page.goto(`${BASE_URL}/ui/team/${LEAD_TEAM}?month=${MONTH}`);
  await phone.page.screenshot({ path: `${SCREENSHOTS}/team-phone.png`, fullPage: true });
  await phone.context.close();
}

// --- Finance: the plan page ------------------------------------------------------------------
{
  const plan = await api(FINANCE_TOKEN, '/v1/plans/consolidation');
  const { context, page } = await newSession();
  await signIn(page, FINANCE_TOKEN);
  await page.click('nav a:text("Plan")');
  await page.waitForURL(/\/ui\/plan$/);
  const freed = plan.models.reduce((n, m) => n + m.freed.length, 0);
  assert.ok(freed > 0, 'the fixture frees a card');
  assert.equal(Number(await page.textContent('[data-field="freed"]')), freed, 'cards freed');
  sameDecimal(amount(await page.textContent('[data-field="saving"]')), plan.monthly_saving, 'monthly saving');
  const model = plan.models.find((m) => m.freed.length > 0);
  const section = page.locator(`section[data-model="${model.model}"]`);
  assert.match(await section.locator('[data-field="summary"]').textContent(),
    new RegExp(`${model.cards_today} cards today, ${model.cards_planned} planned`));
  await checkCharts(page, ['today-0', 'planned-0']);
  // The planned map: a bar per card kept and one per card freed.
  const bars = await page.locator('svg[data-chart="planned-0"] rect[stroke="#bbb"]').count();
  assert.equal(bars, model.cards.length + model.freed.length, 'bars on the planned map');
  const hovers = await page.locator('svg[data-chart="planned-0"] .mark title').allTextContents();
  for (const c of model.cards) for (const i of c.instances) {
    const placed = new RegExp(`^${i.profile.replace('.', '\\.')}( \\(today [^)]+\\))? at memory slices ${i.start}-`);
    assert.ok(hovers.some((h) => placed.test(h)), `${i.slice_uuid} placed at ${i.start}`);
  }
  assert.equal(await page.locator('table[data-table="moves"] tbody tr').count(), model.moves.length, 'one row per move');
  await checkAccessibility(page, 'plan');
  await page.screenshot({ path: `${SCREENSHOTS}/plan.png`, fullPage: true });
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.click('a:text("Download the mig-parted configuration")'),
  ]);
  const yaml = await (await import('node:fs/promises')).readFile(await download.path(), 'utf8');
  assert.match(yaml, /^version: v1\nmig-configs:\n/, 'a mig-parted file');
  assert.equal(yaml, plan.mig_parted, 'the same file as the API\'s');
  await context.close();

  const phone = await newSession({ width: 390, height: 844 });
  await signIn(phone.page, FINANCE_TOKEN);
  await phone.page.goto(`${BASE_URL}/ui/plan`);
  const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the plan page is ${overflow} px wider than a phone`);
  await phone.page.screenshot({ path: `${SCREENSHOTS}/plan-phone.png`, fullPage: true });
  await phone.context.close();

  const lead = await newSession();
  await signIn(lead.page, LEAD_TOKEN);
  const r = await lead.page.goto(`${BASE_URL}/ui/plan`);
  assert.equal(r.status(), 403, 'a lead opening the plan page');
  await lead.context.close();
}

const remote = requests.filter((u) => !/^(https?:\/\/(127\.0\.0\.1|localhost)(:\d+)?\/|data:|blob:)/.test(u));
assert.deepEqual(remote, [], 'requests that left the machine');
// --- Admin: the token page -------------------------------------------------------------------
{
  const { context, page } = await newSession();
  await signIn(page, ADMIN_TOKEN);
  await page.click('nav a:text("Tokens")');
  await page.waitForURL(/\/ui\/tokens$/);
  await page.selectOption('#role', 'team_lead');
  await page.selectOption('#team', LEAD_TEAM);
  await page.fill('#label', 'made in the browser');
  await Promise.all([page.waitForNavigation(), page.click('button:text("Make token")')]);
  const secret = (await page.textContent('[data-field="new-token"]')).trim();
  assert.match(secret, /^smt_\d+_[0-9a-f]{64}$/, 'the new token, shown once');
  const [, id, hidden] = secret.split('_');
  // It works, and sees its own team only.
  const budgets = await api(secret, '/v1/budgets');
  assert.ok(budgets.length > 0 && budgets.every((b) => b.team === LEAD_TEAM), 'the new lead token reads its budget');
  // Neither the API's list nor the page's shows a secret.
  const listed = await api(ADMIN_TOKEN, '/v1/tokens');
  const made = listed.find((t) => t.id === Number(id));
  assert.equal(made.label, 'made in the browser');
  assert.equal(made.team, LEAD_TEAM);
  assert.ok(!JSON.stringify(listed).includes(hidden), 'GET /v1/tokens shows no secret');
  await page.goto(`${BASE_URL}/ui/tokens`);
  assert.ok(!(await page.content()).includes(hidden), 'the token list shows no secret');
  assert.equal((await page.textContent(`tr[data-token="${id}"] [data-field="state"]`)).trim(), 'active');
  // A bad form names the bad field, in the API's words.
  await page.selectOption('#role', 'collector');
  await Promise.all([page.waitForNavigation(), page.click('button:text("Make token")')]);
  assert.match(await page.textContent('[data-field="errors"]'), /node: a collector token needs its node/);
  await checkAccessibility(page, 'tokens');
  await page.screenshot({ path: `${SCREENSHOTS}/tokens.png`, fullPage: true });
  // Revoked on the page: 401 from then on.
  await Promise.all([page.waitForURL(/\/ui\/tokens$/), page.click(`tr[data-token="${id}"] button:text("Revoke")`)]);
  assert.match(await page.textContent(`tr[data-token="${id}"] [data-field="state"]`), /^revoked /);
  const after = await fetch(`${BASE_URL}/v1/budgets`, { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(after.status, 401, 'a revoked token');
  await context.close();

  const finance = await newSession();
  await signIn(finance.page, FINANCE_TOKEN);
  assert.equal(await finance.page.locator('nav a:text("Tokens")').count(), 0, 'finance has no Tokens link');
  const r = await finance.page.goto(`${BASE_URL}/ui/tokens`);
  assert.equal(r.status(), 403, 'finance opening the token page');
  await finance.context.close();
}

console.log(`${requests.length} requests, all on loopback; screenshots in ${SCREENSHOTS}`);
await browser.close();
