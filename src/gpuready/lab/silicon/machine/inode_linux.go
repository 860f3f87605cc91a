package machine

import (
	"os"
	"syscall"
)

// inode is the file's inode number: an atomic rewrite keeps size and may keep mtime, never the inode.
func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
