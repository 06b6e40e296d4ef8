// Package packcheck holds the checks of a repository's object files on
// disk, each read in constant memory: its packs against their indexes
// ([Packs]: whole, each index naming its pack's checksum and count, in
// full or quickly), an index read through ([VerifyIndex]), a pack's
// content against its checksum ([PackSum]), a loose object against its
// name ([Loose]).
package packcheck
