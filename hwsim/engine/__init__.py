"""The engine: streams of work items (kernels, copies, host work) timed on a device's units.

- timer.py: one work item's isolated timing (closed form, waves or tiles) on the memory path;
- replay.py: a cache around the timer, keyed by the item's resource demand;
- sharing.py: units divided among items of concurrent streams, through SimPy events;
- stream.py: a stream as a SimPy process (dispatch, run-ahead, waits on copies);
- copy.py: the copy-engine work item (collectives' link flows: hwsim/parallel/flows.py);
- environment.py: the SimPy environment that counts the events it processes.
"""
