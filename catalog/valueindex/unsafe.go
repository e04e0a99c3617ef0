package valueindex

import "unsafe"

// unsafeString views b as a string without copying. Only used on the index's
// arenas, which are never written after the index is built.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
