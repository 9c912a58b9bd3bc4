// Package recordwire is the commit record of gpufabric-scheduler's commit
// room (pkg/gang/commit): what a record holds (Record: the root it is
// named by, the leaf PodGroups, the pods with their nodes and groups, the
// claims with the pods and groups they are reserved for and the
// fingerprint of the allocation written), its validation, and its JSON:
// version 2 for a flat gang, version 3 for a CompositePodGroup tree,
// version 1 still read. A leaf: it knows nothing of the API, the store or
// recovery.
//
// Files: record.go (Record and its parts, the bounds, Validate, Problems),
// wire.go (the JSON of every version: Encode, Decode, DecodeStrict).
//
// Rules:
//   - Decode is strict (no unknown field, no field of another version, no
//     trailing data), checks every index before it is used and bounds
//     every list before its entries are kept, validates the record, and
//     checks that the object name is the one of the root it names.
//   - Encode writes what Decode reads back to an equal Record; a flat
//     gang's record is version 2 byte for byte as the previous release
//     wrote it.
package recordwire
