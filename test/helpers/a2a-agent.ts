/**
 * @module
 * A real A2A agent for the tests: the SDK's own JSON-RPC handler over an in-memory task
 * store, whose agent answers each message with a completed task saying `echo: <text>`.
 */
// @ts-types="@a2a-js/sdk"
import { Role, TaskState } from '@a2a-js/sdk';
// @ts-types="@a2a-js/sdk/server"
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryTaskStore,
  JsonRpcTransportHandler,
} from '@a2a-js/sdk/server';

/** The SDK's JSON-RPC handler for `card`'s echoing agent; `executed()` is called as each message runs. */
export function echoAgent(card: unknown, executed: () => void): JsonRpcTransportHandler {
  return new JsonRpcTransportHandler(
    new DefaultRequestHandler(card as never, new InMemoryTaskStore(), {
      async execute(context, bus) {
        executed();
        const said = context.userMessage.parts[0]?.content as { value: string } | undefined;
        bus.publish(
          AgentEvent.task({
            id: context.taskId,
            contextId: context.contextId,
            status: {
              state: TaskState.TASK_STATE_COMPLETED,
              message: {
                messageId: crypto.randomUUID(),
                contextId: context.contextId,
                taskId: context.taskId,
                role: Role.ROLE_AGENT,
                parts: [{ content: { $case: 'text', value: `echo: ${said?.value}` } }],
              },
            },
            artifacts: [],
            history: [],
          } as never),
        );
        bus.finished();
      },
      async cancelTask() {},
    }),
  );
}

/** A user message as the v1.0 SDK client takes it. */
export function userMessage(text: string): never {
  return {
    message: {
      messageId: crypto.randomUUID(),
      role: Role.ROLE_USER,
      parts: [{ content: { $case: 'text', value: text } }],
    },
  } as never;
}
