/**
 * @module
 * The demo's acts after the storm: the MCP agent of examples/mcp-agent/ and the
 * model-provider calls of examples/providers/, run in this process and told briefly
 * (their setting in a few lines, then the table of what their servers counted). Each
 * example's own check decides whether its act held.
 */

import * as mcpAgent from '../mcp-agent/agent.ts';
import * as providers from '../providers/calls.ts';

/** What an act printed and what broke in it. */
export interface ActResult {
  /** The table, and where to see the whole story. */
  lines: string[];
  /** The example's check: empty when breakwater held. */
  problems: string[];
}

/** One act after the storm. */
export interface Act {
  /** Its heading, `Act 2: ...`. */
  title: string;
  /** Its name on the progress line (stderr). */
  name: string;
  /** The setting, printed before it runs. */
  intro: string[];
  run(): Promise<ActResult>;
}

/** The acts, in the order the demo runs them (one after the other: each has ms-scale windows). */
export const ACTS: readonly Act[] = [
  act(
    'Act 2: an MCP agent',
    'mcp-agent',
    mcpAgent.formatSummary(),
    mcpAgent.runMcpAgent,
    mcpAgent.formatTable,
  ),
  act(
    'Act 3: model-provider calls',
    'providers',
    providers.formatSummary(),
    providers.runProviderCalls,
    providers.formatTable,
  ),
];

/**
 * An act made of an example (`examples/<example>/`): its comparison, told as its table
 * and the command that tells the whole story.
 */
function act<Comparison extends { problems: string[] }>(
  title: string,
  example: string,
  intro: string[],
  compare: () => Promise<Comparison>,
  table: (comparison: Comparison) => string[],
): Act {
  return {
    title,
    name: example,
    intro,
    async run() {
      const comparison = await compare();
      return {
        lines: [...table(comparison), `the whole story: node --import tsx examples/${example}/main.ts`],
        problems: comparison.problems,
      };
    },
  };
}
