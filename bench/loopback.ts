// Shared by the benches: a loopback HTTP server in its own process (so it does not
// share an event loop with the client under test), and the median.
import { spawn } from 'node:child_process';

/** Answers every request, after reading its body, with a small JSON 200. */
const SERVER = `
const server = require('node:http').createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
    res.end('{"ok":true}');
  });
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

/** A running bench server: its origin, and a way to stop it. */
export interface BenchServer {
  origin: string;
  close(): void;
}

/** Starts the server on 127.0.0.1, port 0, in a child Node process. */
export async function startServer(): Promise<BenchServer> {
  const child = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) =>
    child.stdout.once('data', (d) => resolve(String(d).trim())),
  );
  return { origin: `http://127.0.0.1:${port}`, close: () => child.kill() };
}

/** The median of a non-empty list. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}
