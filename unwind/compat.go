package unwind

import "github.com/rewindstack/rewind/target"

// Transitional aliases while the data types move to package target; they
// are removed once every user imports target.
type (
	// Deprecated: use target.Memory.
	Memory = target.Memory
	// Deprecated: use target.MemoryError.
	MemoryError = target.MemoryError
	// Deprecated: use target.Region.
	Region = target.Region
	// Deprecated: use target.Snapshot.
	Snapshot = target.Snapshot
	// Deprecated: use target.Mapping.
	Mapping = target.Mapping
	// Deprecated: use target.Module.
	Module = target.Module
	// Deprecated: use target.Objects.
	Objects = target.Objects
	// Deprecated: use target.AddressSpace.
	AddressSpace = target.AddressSpace
)
