//go:build unix

package filecache

import (
	"os"
	"syscall"
)

// sysIdentity fills the device, inode and change time from the system's stat.
func sysIdentity(st os.FileInfo, id *Identity) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	id.Dev, id.Ino = uint64(s.Dev), uint64(s.Ino)
	id.ChangeNs = changeTime(s)
}
