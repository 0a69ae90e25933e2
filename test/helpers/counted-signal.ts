/**
 * A signal whose live `abort` listeners are counted: `most()` is the most it had at once.
 * Node warns "Possible EventTarget memory leak detected" at 11 on one signal, and an SDK
 * reuses one signal for every request (the MCP SDK's transport).
 */
export function countedSignal(): { controller: AbortController; signal: AbortSignal; most: () => number } {
  const controller = new AbortController();
  const { signal } = controller;
  const live = new Set<unknown>();
  let most = 0;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((type: string, listener: EventListener, options?: AddEventListenerOptions) => {
    if (type === 'abort') most = Math.max(most, live.add(listener).size);
    add(type, listener, options);
  }) as typeof signal.addEventListener;
  signal.removeEventListener = ((type: string, listener: EventListener, options?: EventListenerOptions) => {
    live.delete(listener);
    remove(type, listener, options);
  }) as typeof signal.removeEventListener;
  return { controller, signal, most: () => most };
}
