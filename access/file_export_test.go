package access

import "slices"

// WatchedDirs returns the directories f's watcher watches, sorted: none
// after Close.
func WatchedDirs(f *File) []string {
	dirs := f.watcher.WatchList()
	slices.Sort(dirs)
	return dirs
}
