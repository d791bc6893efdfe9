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
