/**
 * @module
 * `breakwater/a2a`: the A2A agent-card resolver and `@a2a-js/sdk` client wiring.
 *
 * - {@link resolveAgentCard} fetches `/.well-known/agent-card.json` through a
 *   breakwater policy (Retry-After waited out, failures as `HttpStatusError`), reads
 *   it under a byte cap and checks the untrusted JSON.
 * - {@link a2aFetch} / {@link a2aIdempotent} make read-only JSON-RPC methods safe to
 *   resend while `SendMessage` and friends are never sent twice.
 * - {@link createA2AClient} puts both together with the SDK's `ClientFactory`.
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 * import { createA2AClient } from 'breakwater/a2a';
 *
 * const client = await createA2AClient('https://agent.example.com', { policy: definePolicy() });
 * const task = await client.getTask({ id: 'task-1' }); // resent after a 503; SendMessage never is
 * ```
 */

export { DEFAULT_MAX_RESPONSE_BYTES } from '../../src/body-limit.ts';
export type {
  AgentCard,
  AgentCardErrorCode,
  AgentInterface,
  AgentSkill,
  ResolveAgentCardOptions,
} from './card.ts';
export { AGENT_CARD_PATH, AgentCardError, resolveAgentCard } from './card.ts';
export type { CreateA2AClientOptions } from './client.ts';
export { createA2AClient } from './client.ts';
export type { A2AFetchOptions } from './fetch.ts';
export { A2A_READ_ONLY_METHODS, a2aFetch, a2aIdempotent } from './fetch.ts';

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/a2a' = 'breakwater/a2a';
