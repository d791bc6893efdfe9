package inventory

// ScriptSHA returns the SHA1 the engine runs the named script by ("buy",
// "pause", ...), or "": tests that hook the client tell script calls apart
// by it.
func ScriptSHA(name string) string {
	for _, s := range allScripts {
		if s.Name == name {
			return s.SHA
		}
	}
	return ""
}

// QueuedBuys counts the buys whose calls wait for the next pipeline.
func (e *Engine) QueuedBuys() int {
	e.pipes.mu.Lock()
	defer e.pipes.mu.Unlock()
	n := 0
	for _, b := range e.pipes.queue {
		n += len(b.waiters)
	}
	return n
}
