// `npm test`: every check, in order, on one command. Each step streams its own
// output; the first failure stops the run with a non-zero exit. At the end the
// three runtimes' test counts are compared: the same suite must run the same
// number of tests on Node, Deno and Bun, or a runtime silently skipped a file.
//
// Some steps run beside another: the Bun suite beside the Deno suite, and the browser,
// package and JSR checks (one after another) beside the Node suite. Most of a suite is
// waiting (servers on loopback, short schedules, child processes), so on a 2-core
// machine a pair takes little longer than its first step alone, and `npm test` stays
// within its 15 minutes. What runs beside is held and shown whole after the first
// step's output, so no two outputs are interleaved.
import { spawn } from 'node:child_process';

/**
 * Groups in order: a group's first step streams its output; the steps after it run
 * beside it, one after another, their output shown once the first has ended.
 */
const steps = [
  [['lint', 'lint']],
  [['typecheck', 'typecheck']],
  [['build', 'build']],
  [['size', 'test:size']],
  [
    ['node', 'test:node'],
    ['browser', 'test:browser'],
    ['package', 'test:pack'],
    ['jsr', 'test:jsr'],
  ],
  [
    ['deno', 'test:deno'],
    ['bun', 'test:bun'],
  ],
];

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping ANSI colour codes
const ansi = /\u001b\[[0-9;]*m/g;

/** Reads "passed / failed" from each runner's own closing lines. */
const summaries = {
  node: (out) => ({ passed: last(out, /^# pass (\d+)$/m), failed: last(out, /^# fail (\d+)$/m) }),
  deno: (out) => ({ passed: last(out, /(\d+) passed/), failed: last(out, /(\d+) failed/) }),
  bun: (out) => ({ passed: last(out, /^\s*(\d+) pass$/m), failed: last(out, /^\s*(\d+) fail$/m) }),
};

function last(text, pattern) {
  const all = [...text.matchAll(new RegExp(pattern.source, `${pattern.flags.replace('g', '')}g`))];
  const match = all.at(-1);
  return match ? Number(match[1]) : undefined;
}

/** Runs an npm script; its output goes to ours as it comes when `live`, else only into `output`. */
function run(script, live) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn('npm', ['run', '--silent', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
      if (live) process.stdout.write(chunk);
    });
    child.stderr.on('data', (chunk) => {
      output += chunk;
      if (live) process.stderr.write(chunk);
    });
    child.on('close', (code) =>
      resolve({ code: code ?? 1, output, seconds: ((Date.now() - started) / 1000).toFixed(1) }),
    );
  });
}

const counts = {};
const began = Date.now();
for (const [[label, script], ...beside] of steps) {
  process.stdout.write(`\n=== ${label} (npm run ${script}) ===\n`);
  // One after another, each only once the one before it passed.
  const besideRuns = (async () => {
    const results = [];
    for (const [name, besideScript] of beside) {
      const result = await run(besideScript, false);
      results.push([name, besideScript, result]);
      if (result.code !== 0) break;
    }
    return results;
  })();
  const ended = [[label, await run(script, true)]];
  for (const [name, besideScript, result] of await besideRuns) {
    process.stdout.write(
      `\n=== ${name} (npm run ${besideScript}, run beside ${label}) ===\n${result.output}`,
    );
    ended.push([name, result]);
  }
  for (const [name, { code, output, seconds }] of ended) {
    if (summaries[name]) counts[name] = summaries[name](output.replace(ansi, ''));
    if (code !== 0) {
      process.stdout.write(`\n=== ${name} FAILED (exit ${code}, ${seconds} s) ===\n`);
      process.exit(code);
    }
    process.stdout.write(`=== ${name} ok (${seconds} s) ===\n`);
  }
}

process.stdout.write('\n=== summary ===\n');
for (const [runtime, { passed, failed }] of Object.entries(counts)) {
  process.stdout.write(`${runtime}: ${passed} passed, ${failed} failed\n`);
}
const passedCounts = new Set(Object.values(counts).map((c) => c.passed));
if (passedCounts.size !== 1 || passedCounts.has(undefined) || passedCounts.has(0)) {
  process.stdout.write('the runtimes ran different numbers of tests (or none): see above\n');
  process.exit(1);
}
const total = Object.values(counts).reduce((n, c) => n + c.passed, 0);
process.stdout.write(
  `tests: ${total} passed, 0 failed (${((Date.now() - began) / 1000).toFixed(0)} s in all)\n`,
);
