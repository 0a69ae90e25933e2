// The demo's `--html` report, rendered in a real headless Chromium (Debian's
// `chromium` package): the page must load, and the chart must be drawn with data
// for each of the three clients. `.ci/run` installs Chromium; elsewhere this step
// says loudly that it did not run (and fails under CI=true, where it must run).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;
const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
const browser = CANDIDATES.find((path) => existsSync(path));

if (browser === undefined) {
  const message = `browser check NOT RUN: no Chromium at ${CANDIDATES.join(' or ')} (apt-get install chromium)`;
  if (process.env.CI === 'true') {
    console.error(`${message}; CI must run it`);
    process.exit(1);
  }
  console.log(message);
  process.exit(0);
}

// Flags for a closed network: no background fetches, no first-run, a fresh profile.
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const work = mkdtempSync(join(tmpdir(), 'breakwater-browser-'));
try {
  const report = join(work, 'report.html');
  execFileSync(
    process.execPath,
    [
      '--import',
      'tsx',
      'examples/demo/main.ts',
      '--calls',
      '120',
      '--storm-ms',
      '2000',
      '--seed',
      '1',
      '--quiet',
      '--storm-only',
      '--html',
      report,
    ],
    { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] },
  );

  const dom = spawnSync(
    browser,
    [...FLAGS, `--user-data-dir=${join(work, 'p1')}`, '--dump-dom', `file://${report}`],
    {
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  if (dom.status !== 0) throw new Error(`chromium --dump-dom failed (${dom.status}): ${dom.stderr}`);
  const svg = dom.stdout.match(/<svg[\s\S]*?<\/svg>/)?.[0];
  if (svg === undefined) throw new Error('the rendered page has no <svg> chart');
  const lines = [...svg.matchAll(/<polyline[^>]*points="([^"]+)"/g)].map((m) => m[1].trim().split(/\s+/));
  if (lines.length !== 3) throw new Error(`expected one line per client (3), found ${lines.length}`);
  for (const points of lines) {
    const ys = points.map((p) => Number(p.split(',')[1]));
    if (points.length < 5 || ys.some(Number.isNaN))
      throw new Error(`a chart line has too few or bad points: ${points.length}`);
    if (new Set(ys).size < 2) throw new Error('a chart line is flat: no requests were plotted');
  }

  const shot = join(work, 'shot.png');
  const pic = spawnSync(
    browser,
    [
      ...FLAGS,
      `--user-data-dir=${join(work, 'p2')}`,
      '--window-size=1100,900',
      `--screenshot=${shot}`,
      `file://${report}`,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  if (pic.status !== 0 || !existsSync(shot)) throw new Error(`chromium --screenshot failed: ${pic.stderr}`);
  const png = readFileSync(shot);
  if (png.subarray(1, 4).toString() !== 'PNG' || statSync(shot).size < 20_000) {
    throw new Error(`the screenshot looks empty (${statSync(shot).size} bytes)`);
  }
  console.log(
    `browser check ok: ${lines.length} chart lines (${lines.map((l) => l.length).join(', ')} points), screenshot ${statSync(shot).size} bytes`,
  );
} finally {
  // Best effort, as in cors.ts: Chromium's helpers may still be writing the profile. The
  // n-th retry waits n × retryDelay: under 3 s in all (50 × 100 ms could take 127 s).
  try {
    rmSync(work, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
  } catch (error) {
    console.warn(`browser check: left ${work} behind (${error.message})`);
  }
}
