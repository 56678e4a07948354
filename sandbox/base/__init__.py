"""Infrastructure every layer uses: errors, the registry mechanism, bounded file reading, output
directories, lazy tables, child processes, progress, the figure worker, heap and GC helpers."""
